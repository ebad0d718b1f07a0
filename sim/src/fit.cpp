// SPDX-License-Identifier: Apache-2.0
// Fits the contention model to measured pairs with weighted, ridge-regularized, non-negative
// least squares (Eigen), one compute mode at a time.
#include "tgs/sim/fit.hpp"
#include "tgs/sim/pairs.hpp"

#include "tgs/rate/mig.hpp"
#include "tgs/rate/mps.hpp"
#include "tgs/sim/contention.hpp"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace tgs::sim {
namespace {

const model_contention zero_model{};
const gpu_contention default_gpu{};

/// One linear equation y = Σ coef_k * param_k, weighted.
struct equation {
  double y = 0;
  double weight = 1;
  /// A row whose weight is not a throughput secant (a TGS row, weighted by how far the
  /// controller's equilibrium moves per unit of error).
  bool fixed_weight = false;
  // What the row says about its job, to bound the interference afterwards.
  std::string model;
  double busy = 1;
  double slice = 0;           // 1/f - 1 of its SM share
  bool compute_only = false;  // no memory overflow: all of y is GPU-phase stretch
  std::vector<std::pair<std::size_t, double>> terms;  // (parameter index, coefficient)
};

/// Parameter indices of one model within one compute mode's system.
struct model_slots {
  std::size_t sensitivity;
  std::size_t thrash;
  std::size_t slice;  // MIG only
};

/// Solves min Σ w²(y - a·p)² + ridge |p|² subject to p ≥ 0 by repeatedly clamping negative
/// parameters to zero and re-solving without them (an active-set method; the systems here have
/// tens of unknowns, so each solve is microseconds).
Eigen::VectorXd solve_weighted(const std::vector<equation>& eqs, std::size_t n, double ridge,
                               double* residual) {
  std::vector<bool> active(n, true);
  Eigen::VectorXd p = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(n));
  for (std::size_t round = 0; round <= n; ++round) {
    Eigen::MatrixXd a = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(eqs.size()),
                                              static_cast<Eigen::Index>(n));
    Eigen::VectorXd y(static_cast<Eigen::Index>(eqs.size()));
    for (std::size_t r = 0; r < eqs.size(); ++r) {
      const auto row = static_cast<Eigen::Index>(r);
      y(row) = eqs[r].weight * eqs[r].y;
      for (const auto& [k, coef] : eqs[r].terms) {
        if (active[k]) a(row, static_cast<Eigen::Index>(k)) += eqs[r].weight * coef;
      }
    }
    Eigen::MatrixXd normal = a.transpose() * a;
    normal.diagonal().array() += ridge;
    p = normal.ldlt().solve(a.transpose() * y);
    bool clamped = false;
    for (std::size_t k = 0; k < n; ++k) {
      if (active[k] && p(static_cast<Eigen::Index>(k)) < 0) {
        active[k] = false;
        clamped = true;
      }
      if (!active[k]) p(static_cast<Eigen::Index>(k)) = 0;
    }
    if (!clamped) {
      if (residual) *residual = (a * p - y).squaredNorm();
      return p;
    }
  }
  if (residual) *residual = std::numeric_limits<double>::infinity();
  return p;
}

/// Minimizes the squared error in throughput x = 1/(1+y), not in y: iteratively reweighted
/// least squares with the secant weight x_target·x_predicted, since
/// x_target - x_predicted = x_target·x_predicted·(y_predicted - y_target) exactly.
/// `residual` receives Σ (x_target - x_predicted)².
Eigen::VectorXd solve_non_negative(std::vector<equation> eqs, std::size_t n, double ridge,
                                   double* residual) {
  std::vector<double> x_target(eqs.size());
  for (std::size_t r = 0; r < eqs.size(); ++r) {
    x_target[r] = 1.0 / (1.0 + eqs[r].y);
    if (!eqs[r].fixed_weight) eqs[r].weight = x_target[r] * x_target[r];
  }
  Eigen::VectorXd p;
  for (int round = 0; round < 30; ++round) {
    p = solve_weighted(eqs, n, ridge, nullptr);
    for (std::size_t r = 0; r < eqs.size(); ++r) {
      double y = 0;
      for (const auto& [k, coef] : eqs[r].terms) y += coef * p(static_cast<Eigen::Index>(k));
      if (!eqs[r].fixed_weight) eqs[r].weight = x_target[r] / (1.0 + std::max(0.0, y));
    }
  }
  if (residual) {
    *residual = 0;
    for (std::size_t r = 0; r < eqs.size(); ++r) {
      double y = 0;
      for (const auto& [k, coef] : eqs[r].terms) y += coef * p(static_cast<Eigen::Index>(k));
      const double err = eqs[r].fixed_weight ? eqs[r].weight * (eqs[r].y - y)
                                             : x_target[r] - 1.0 / (1.0 + std::max(0.0, y));
      *residual += err * err;
    }
  }
  return p;
}

double aggressor(double busy, double exponent) { return std::pow(busy, exponent); }

}  // namespace

const model_contention& contention_table::model(std::string_view m, std::string_view g) const {
  for (const auto& e : models_) {
    if (e.model == m && e.gpu == g) return e.params;
  }
  return zero_model;
}

const gpu_contention& contention_table::gpu(std::string_view g) const {
  for (const auto& e : gpus_) {
    if (e.gpu == g) return e.params;
  }
  return default_gpu;
}

model_contention& contention_table::model_mut(std::string_view m, std::string_view g) {
  for (auto& e : models_) {
    if (e.model == m && e.gpu == g) return e.params;
  }
  models_.push_back({std::string(m), std::string(g), {}});
  return models_.back().params;
}

gpu_contention& contention_table::gpu_mut(std::string_view g) {
  for (auto& e : gpus_) {
    if (e.gpu == g) return e.params;
  }
  gpus_.push_back({std::string(g), {}});
  return gpus_.back().params;
}

fit_settings::fit_settings()
    : mig_production_fraction(static_cast<double>(mig::config{}.production_slices) /
                              static_cast<double>(mig::config{}.total_slices)),
      mig_opportunistic_fraction(static_cast<double>(mig::config{}.opportunistic_slices) /
                                 static_cast<double>(mig::config{}.total_slices)),
      mps_production_fraction(mps::config{}.production_threads),
      mps_opportunistic_fraction(mps::config{}.opportunistic_threads) {}

contention_table fit_contention(const catalog& c, const fit_settings& s) {
  contention_table table;
  for (const auto& m : c.models) table.model_mut(m.model, m.gpu);
  for (const auto& g : c.gpus) {
    table.gpu_mut(g.name).occupancy_exponent[static_cast<std::size_t>(compute_mode::time_slicing)] =
        s.time_slicing_occupancy_exponent;
  }

  for (const auto& gpu : c.gpus) {
    // Index the models measured on this GPU.
    std::map<std::string, std::size_t> index;
    for (const auto& p : c.measurements) {
      if (p.gpu != gpu.name) continue;
      for (const auto& name : {p.production_model, p.opportunistic_model}) {
        index.emplace(name, index.size());
      }
    }
    if (index.empty()) continue;
    const double capacity = static_cast<double>(gpu.memory.count());

    for (std::size_t mode_i = 0; mode_i < compute_mode_count; ++mode_i) {
      const auto mode = static_cast<compute_mode>(mode_i);
      const double occupancy_exponent = table.gpu(gpu.name).occupancy_exponent[mode_i];
      const std::size_t per_model = 3;
      const std::size_t n = index.size() * per_model;
      auto slots = [&](const std::string& model) {
        const std::size_t base = index.at(model) * per_model;
        return model_slots{base, base + 1, base + 2};
      };

      // Builds the equations for one aggressor exponent.
      auto equations = [&](double exponent) {
        std::vector<equation> eqs;
        for (const auto& p : c.measurements) {
          if (p.gpu != gpu.name || policy_traits(p.policy).mechanism != mode) continue;
          // A policy that holds the production job at its band says how much the production job
          // tolerates there, not how the two contend unchecked.
          const bool tgs = policy_traits(p.policy).adaptive;
          const model_profile& prod = *c.find_model(p.production_model, p.gpu);
          const model_profile& opp = *c.find_model(p.opportunistic_model, p.gpu);
          const double fp = static_cast<double>(prod.footprint.count());
          const double fo = static_cast<double>(opp.footprint.count());
          struct side {
            const model_profile* self;
            const model_profile* other;
            double x;
            double x_other;
            double fraction;
            double overflow;
            bool is_production;
          };
          const double xp = std::max(p.production, s.floor);
          const double xo = std::max(p.opportunistic, s.floor);
          double overflow_p = 0;
          double overflow_o = 0;
          double fraction_p = 1;
          double fraction_o = 1;
          if (mode == compute_mode::mps) {
            fraction_p = s.mps_production_fraction;
            fraction_o = s.mps_opportunistic_fraction;
          }
          if (mode == compute_mode::mig) {
            fraction_p = s.mig_production_fraction;
            fraction_o = s.mig_opportunistic_fraction;
            overflow_p = std::max(0.0, fp - capacity * fraction_p) / (capacity * fraction_p);
            overflow_o = std::max(0.0, fo - capacity * fraction_o) / (capacity * fraction_o);
          } else if (!tgs) {
            overflow_p = overflow_o = std::max(0.0, fp + fo - capacity) / capacity;
          }
          std::vector<side> sides;
          // TGS holds the production job at the edge of its dead band: the cell tells how much
          // opportunistic occupancy the production job tolerates there. The opportunistic job is
          // throttled, so its throughput says nothing about its own sensitivity.
          sides.push_back({&prod, &opp, tgs ? 1.0 - s.tgs_dead_band : xp, xo, fraction_p,
                           overflow_p, true});
          if (!tgs) sides.push_back({&opp, &prod, xo, xp, fraction_o, overflow_o, false});
          for (const auto& sd : sides) {
            const double b = sd.self->busy_fraction;
            const double bo = sd.other->busy_fraction;
            const double other_overflow = sd.is_production ? overflow_o : overflow_p;
            // The co-runner's GPU-phase stretch, from its own measured throughput when it is
            // compute-bound; a thrashing co-runner is taken as unstretched.
            double stretch_other = 1;
            if (other_overflow == 0 && !(tgs && sd.is_production)) {
              stretch_other = std::max(1.0, (1.0 / sd.x_other - (1.0 - bo)) / bo);
            }
            const double occupancy_other = bo * stretch_other * sd.x_other;
            equation e;
            e.y = 1.0 / sd.x - 1.0;
            e.model = sd.self->model;
            e.busy = b;
            e.slice = sd.fraction < 1 ? 1.0 / sd.fraction - 1.0 : 0.0;
            // A TGS row holds the production job at the dead band by construction: it says
            // nothing about how far interference can go.
            e.compute_only = sd.overflow == 0 && !tgs;
            if (tgs) {
              // The controller settles where the production job's loss equals y. An error r in
              // this row moves the opportunistic equilibrium by about r·x_o/y in throughput:
              // weight it so, or the steep TGS cells would be traded for flat baseline ones.
              e.fixed_weight = true;
              e.weight = xo / e.y;
            }
            const model_slots sl = slots(sd.self->model);
            e.terms.push_back({sl.sensitivity, b * aggressor(bo, exponent) *
                                                   std::pow(occupancy_other, occupancy_exponent)});
            if (sd.overflow > 0) e.terms.push_back({sl.thrash, thrash_pressure(sd.overflow)});
            // A thrashing job's throughput cannot separate its slice's slowdown from the
            // thrash: its slice sensitivity comes from compute-bound rows only.
            if (sd.fraction < 1 && sd.overflow == 0) {
              e.terms.push_back({sl.slice, b * (1.0 / sd.fraction - 1.0)});
            }
            eqs.push_back(std::move(e));
          }
        }
        return eqs;
      };

      if (equations(1.0).empty()) continue;
      // The most kernel work a measured pair did on shared SMs bounds the model's pairs.
      if (mode != compute_mode::mig) {
        double most = 1.0;
        for (const auto& p : c.measurements) {
          if (p.gpu != gpu.name || policy_traits(p.policy).mechanism != mode) continue;
          most = std::max(most, c.find_model(p.production_model, p.gpu)->busy_fraction * p.production +
                                    c.find_model(p.opportunistic_model, p.gpu)->busy_fraction *
                                        p.opportunistic);
        }
        table.gpu_mut(gpu.name).max_pair_work[mode_i] = most;
      }
      // Grid search for the aggressor exponent (one scalar per GPU type and mode), linear
      // least squares for everything else.
      double best_exponent = 1;
      double best_residual = std::numeric_limits<double>::infinity();
      for (int step = 0; step <= 160; ++step) {
        const double exponent = 0.05 * step;
        double residual = 0;
        solve_non_negative(equations(exponent), n, s.ridge, &residual);
        if (residual < best_residual - 1e-15) {
          best_residual = residual;
          best_exponent = exponent;
        }
      }
      const std::vector<equation> eqs = equations(best_exponent);
      const Eigen::VectorXd p = solve_non_negative(eqs, n, s.ridge, nullptr);
      table.gpu_mut(gpu.name).aggressor_exponent[mode_i] = best_exponent;
      for (const auto& [model, i] : index) {
        model_contention& mc = table.model_mut(model, gpu.name);
        const auto base = static_cast<Eigen::Index>(i * per_model);
        mc.sensitivity[mode_i] = p(base);
        mc.thrash[mode_i] = p(base + 1);
        if (mode != compute_mode::time_slicing) mc.slice_sensitivity[mode_i] = p(base + 2);
      }
      // The largest interference stretch a compute-bound measurement implies, per model: the
      // forward model does not go past it.
      std::map<std::string, double> bounds;
      for (const auto& e : eqs) {
        if (!e.compute_only) continue;
        const double implied =
            e.y / e.busy - table.model(e.model, gpu.name).slice_sensitivity[mode_i] * e.slice;
        bounds[e.model] = std::max(bounds[e.model], implied);
      }
      // A model measured only in other ways (oversubscribed, or as TGS's production job) takes
      // the mean bound of the others.
      double mean_bound = 0;
      for (const auto& [model, bound] : bounds) {
        mean_bound += bound / static_cast<double>(bounds.size());
      }
      for (const auto& [model, i] : index) {
        const auto it = bounds.find(model);
        table.model_mut(model, gpu.name).max_interference[mode_i] =
            it != bounds.end() ? it->second : mean_bound;
      }
    }
    // A model without measured pairs on this GPU takes the median of the measured models'
    // parameters: a neutral prior (the median, because one model's poorly identified value must
    // not set everyone's), better than assuming it neither suffers nor causes interference.
    // Measure it (a pair with any profiled model) to replace the prior.
    auto median = [&](auto field) {
      std::vector<double> values;
      for (const auto& [model, i] : index) values.push_back(field(table.model(model, gpu.name)));
      std::sort(values.begin(), values.end());
      const std::size_t n = values.size();
      return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
    };
    model_contention mean{};
    for (std::size_t k = 0; k < compute_mode_count; ++k) {
      mean.sensitivity[k] = median([k](const model_contention& m) { return m.sensitivity[k]; });
      mean.thrash[k] = median([k](const model_contention& m) { return m.thrash[k]; });
      mean.slice_sensitivity[k] =
          median([k](const model_contention& m) { return m.slice_sensitivity[k]; });
      mean.max_interference[k] =
          median([k](const model_contention& m) { return m.max_interference[k]; });
    }
    for (const auto& m : c.models) {
      if (m.gpu == gpu.name && !index.contains(m.model)) table.model_mut(m.model, gpu.name) = mean;
    }
  }
  return table;
}

}  // namespace tgs::sim
