// SPDX-License-Identifier: Apache-2.0
// The global fit: bounded Levenberg–Marquardt over each GPU type's mechanism parameters and the
// profile fields still marked fitted, minimizing the squared error of every measured cell of a
// non-adaptive policy, each simulated with the real policy objects; standard errors from the
// Jacobian at the optimum, and their propagation to predictions.
#include "tgs/sim/fit.hpp"

#include <fmt/format.h>

#include <Eigen/Dense>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/sim/pairs.hpp"

namespace tgs::sim {
namespace {

/// What a fitted number is, and where it lives in a catalog.
enum class target_kind : std::uint8_t {
  switch_loss,
  overrun_switch,
  mps_switch_loss,
  mps_capacity,
  mps_priority_loss,
  thrash_time_slicing,
  thrash_mps,
  thrash_mig,
  busy_fraction,
  blocks_per_iteration,
  hot_set,
  slice_sensitivity,
};

constexpr std::string_view name_of(target_kind k) noexcept {
  switch (k) {
    case target_kind::switch_loss: return "switch_loss";
    case target_kind::overrun_switch: return "overrun_switch_s";
    case target_kind::mps_switch_loss: return "mps_switch_loss";
    case target_kind::mps_capacity: return "mps_capacity";
    case target_kind::mps_priority_loss: return "mps_priority_loss";
    case target_kind::thrash_time_slicing: return "thrash_time_slicing";
    case target_kind::thrash_mps: return "thrash_mps";
    case target_kind::thrash_mig: return "thrash_mig";
    case target_kind::busy_fraction: return "busy_fraction";
    case target_kind::blocks_per_iteration: return "blocks_per_iteration";
    case target_kind::hot_set: return "hot_gib";
    case target_kind::slice_sensitivity: return "slice_sensitivity";
  }
  return "";
}

std::optional<target_kind> kind_named(std::string_view name) noexcept {
  for (int k = 0; k <= static_cast<int>(target_kind::slice_sensitivity); ++k) {
    if (name_of(static_cast<target_kind>(k)) == name) return static_cast<target_kind>(k);
  }
  return std::nullopt;
}

/// Reads or writes one fitted number of a catalog.
double& gpu_field(gpu_profile& g, target_kind k) {
  switch (k) {
    case target_kind::switch_loss: return g.contention.switch_loss;
    case target_kind::overrun_switch: return g.contention.overrun_switch_s;
    case target_kind::mps_switch_loss: return g.contention.mps_switch_loss;
    case target_kind::mps_capacity: return g.contention.mps_capacity;
    case target_kind::mps_priority_loss: return g.contention.mps_priority_loss;
    case target_kind::thrash_time_slicing: return g.contention.thrash[0];
    case target_kind::thrash_mps: return g.contention.thrash[1];
    default: return g.contention.thrash[2];
  }
}

double get(const catalog& c, const fit_parameter& p, target_kind k) {
  if (p.model.empty()) {
    gpu_profile g = *c.find_gpu(p.gpu);
    // Unmeasured, the priority loss is the MPS loss (profiles.hpp): the fit starts there.
    if (k == target_kind::mps_priority_loss && std::isnan(g.contention.mps_priority_loss)) {
      return g.contention.mps_switch_loss;
    }
    return gpu_field(g, k);
  }
  const model_profile& m = *c.find_model(p.model, p.gpu);
  switch (k) {
    case target_kind::busy_fraction: return m.busy_fraction;
    case target_kind::blocks_per_iteration: return m.blocks_per_iteration;
    case target_kind::hot_set: return m.hot_set.gib();
    default: return m.slice_sensitivity;
  }
}

void set(catalog& c, const fit_parameter& p, target_kind k, double v) {
  if (p.model.empty()) {
    for (auto& g : c.gpus) {
      if (g.name == p.gpu) gpu_field(g, k) = v;
    }
    return;
  }
  for (auto& m : c.models) {
    if (m.model != p.model || m.gpu != p.gpu) continue;
    switch (k) {
      case target_kind::busy_fraction: m.busy_fraction = v; break;
      case target_kind::blocks_per_iteration: m.blocks_per_iteration = v; break;
      case target_kind::hot_set: m.hot_set = from_gib(v); break;
      default: m.slice_sensitivity = v; break;
    }
  }
}

/// Where a fitted number may lie, and how its coordinate in [0, 1] maps onto it.
struct parameter_range {
  double lo;
  double hi;
  bool log_scale;

  [[nodiscard]] double value_at(double u) const noexcept {
    return log_scale ? std::exp(std::log(lo) + u * (std::log(hi) - std::log(lo))) : lo + u * (hi - lo);
  }
  [[nodiscard]] double coordinate_of(double v) const noexcept {
    const double x = log_scale ? (std::log(std::max(v, lo)) - std::log(lo)) / (std::log(hi) - std::log(lo))
                               : (v - lo) / (hi - lo);
    return std::clamp(x, 0.0, 1.0);
  }
  /// d value / d coordinate at `v`.
  [[nodiscard]] double slope_at(double v) const noexcept {
    return log_scale ? v * (std::log(hi) - std::log(lo)) : hi - lo;
  }
};

parameter_range range_of(const catalog& c, const fit_parameter& p, target_kind k) {
  switch (k) {
    case target_kind::switch_loss:
    case target_kind::mps_switch_loss:
    case target_kind::mps_priority_loss: return {0.0, 3.0, false};
    case target_kind::overrun_switch: return {0.0, 100e-6, false};
    case target_kind::mps_capacity: return {1.0, 2.0, false};
    case target_kind::thrash_time_slicing:
    case target_kind::thrash_mps:
    case target_kind::thrash_mig: return {0.0, 50.0, false};
    case target_kind::busy_fraction: return {0.02, 1.0, false};
    case target_kind::blocks_per_iteration: return {1e3, 1e9, true};
    case target_kind::hot_set: return {0.0, std::max(c.find_model(p.model, p.gpu)->footprint.gib(), 1e-3), false};
    case target_kind::slice_sensitivity: return {0.0, 1.0, false};
  }
  return {0.0, 1.0, false};
}

/// A parameter being fitted: its bounds, its coordinate in [0, 1], the cells it moves.
struct search_param {
  fit_parameter id;
  target_kind kind;
  parameter_range range;
  bool profile;  // a profile field: a weak prior holds it near its table value where cells are silent
  double start_u = 0;
  double u = 0;
  std::vector<std::size_t> cells{};  // indices into its GPU type's cells
};

/// A fittable cell, ready to run.
struct fit_cell {
  const measured_pair* cell;
  pair_request request;
  compute_mode mode;
  std::string memory_policy;
};

// The prior's weight on a profile field's coordinate: a field no cell speaks to stays at its
// table value, one the cells speak to barely feels it (0.03 of a throughput per unit of
// coordinate, against residuals of 0.1).
constexpr double prior_weight = 1e-3;

/// Whether a cell ran the opportunistic job as an MPS client at below-normal priority.
bool below_normal(const measured_pair& m) {
  if (m.policy == "priority-share") return true;
  return std::any_of(m.settings.begin(), m.settings.end(), [](const auto& kv) {
    return kv.first == "mps.opportunistic-below-normal" && kv.second != "0";
  });
}

bool involves(const measured_pair& m, const std::string& model) {
  return m.production_model == model || m.opportunistic_model == model;
}

double setting_or(const measured_pair& m, std::string_view key, double fallback) {
  for (const auto& [k, v] : m.settings) {
    if (k != key) continue;
    double x = 0;
    const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec == std::errc{} && ptr == v.data() + v.size()) return x;
  }
  return fallback;
}

/// Whether a cell's jobs oversubscribe shared unified memory (or a MIG slice's memory).
bool overflows(const catalog& c, const fit_cell& f) {
  const measured_pair& m = *f.cell;
  const gpu_profile& g = *c.find_gpu(m.gpu);
  const double budget = static_cast<double>(m.memory_budget.value_or(g.memory).count());
  const double p = static_cast<double>(c.find_model(m.production_model, m.gpu)->footprint.count());
  const double o = m.opportunistic_model.empty()
                       ? 0.0
                       : static_cast<double>(c.find_model(m.opportunistic_model, m.gpu)->footprint.count());
  if (f.mode == compute_mode::mig) return p > budget * 4 / 7 || o > budget * 3 / 7;
  return any_memory_policy::paging_of_policy(f.memory_policy) == memory_paging::driver_demand && p + o > budget;
}

/// One GPU type's least-squares problem over the coordinates of its parameters. The residuals are
/// each measured throughput's prediction minus the measurement, then one prior row per profile
/// field, √w·(u − u₀).
class gpu_problem {
 public:
  gpu_problem(catalog& work, std::vector<fit_cell> cells, std::vector<search_param> params)
      : work_(work), cells_(std::move(cells)), params_(std::move(params)) {
    for (const auto& f : cells_) {
      first_row_.push_back(data_rows_);
      data_rows_ += (f.cell->production ? 1 : 0) + (f.cell->opportunistic ? 1 : 0);
    }
    for (const auto& p : params_) prior_rows_ += p.profile ? 1 : 0;
  }

  [[nodiscard]] Eigen::Index data_rows() const noexcept { return data_rows_; }
  [[nodiscard]] Eigen::Index rows() const noexcept { return data_rows_ + prior_rows_; }
  [[nodiscard]] Eigen::Index size() const noexcept { return static_cast<Eigen::Index>(params_.size()); }
  [[nodiscard]] std::vector<search_param>& params() noexcept { return params_; }

  [[nodiscard]] Eigen::VectorXd coordinates() const {
    Eigen::VectorXd u(size());
    for (Eigen::Index j = 0; j < size(); ++j) u[j] = params_[static_cast<std::size_t>(j)].u;
    return u;
  }

  void move_to(const Eigen::VectorXd& u) {
    for (Eigen::Index j = 0; j < size(); ++j) move(j, u[j]);
  }

  /// Every residual at the current coordinates.
  [[nodiscard]] Eigen::VectorXd residuals() const {
    Eigen::VectorXd r(rows());
    for (std::size_t i = 0; i < cells_.size(); ++i) evaluate(i, r);
    Eigen::Index row = data_rows_;
    for (const auto& p : params_) {
      if (p.profile) r[row++] = std::sqrt(prior_weight) * (p.u - p.start_u);
    }
    return r;
  }

  /// The Jacobian at the current coordinates, whose residuals are `r`, by central differences
  /// (one-sided at a bound); each parameter reruns only the cells it moves.
  [[nodiscard]] Eigen::MatrixXd jacobian(const Eigen::VectorXd& r) {
    // A ten-thousandth of the range: far above the simulation's rounding (nanosecond event times,
    // whole bytes), small against the curvature of the throughputs.
    constexpr double h = 1e-4;
    Eigen::MatrixXd J = Eigen::MatrixXd::Zero(rows(), size());
    Eigen::VectorXd up = r;
    Eigen::VectorXd down = r;
    Eigen::Index prior_row = data_rows_;
    for (Eigen::Index j = 0; j < size(); ++j) {
      auto& p = params_[static_cast<std::size_t>(j)];
      const double from = p.u;
      const double hi = std::min(1.0, from + h);
      const double lo = std::max(0.0, from - h);
      for (std::size_t i : p.cells) {
        if (hi != from) {
          move(j, hi);
          evaluate(i, up);
        }
        if (lo != from) {
          move(j, lo);
          evaluate(i, down);
        }
        for (Eigen::Index row = first_row_[i]; row < end_row(i); ++row) J(row, j) = (up[row] - down[row]) / (hi - lo);
      }
      move(j, from);
      if (p.profile) J(prior_row++, j) = std::sqrt(prior_weight);
    }
    return J;
  }

 private:
  void move(Eigen::Index j, double u) {
    auto& p = params_[static_cast<std::size_t>(j)];
    p.u = u;
    set(work_, p.id, p.kind, p.range.value_at(u));
  }

  [[nodiscard]] Eigen::Index end_row(std::size_t i) const noexcept {
    return i + 1 < first_row_.size() ? first_row_[i + 1] : data_rows_;
  }

  void evaluate(std::size_t i, Eigen::VectorXd& r) const {
    static const pair_options steady = steady_state_options();
    const fit_cell& f = cells_[i];
    const pair_result out = run_pair_request(work_, f.request, steady);
    Eigen::Index row = first_row_[i];
    if (f.cell->production) r[row++] = out.outcome.production - *f.cell->production;
    if (f.cell->opportunistic) r[row] = out.outcome.opportunistic - *f.cell->opportunistic;
  }

  catalog& work_;
  std::vector<fit_cell> cells_;
  std::vector<search_param> params_;
  std::vector<Eigen::Index> first_row_;
  Eigen::Index data_rows_ = 0;
  Eigen::Index prior_rows_ = 0;
};

/// Bounded Levenberg–Marquardt on the coordinates in [0, 1] (projected: a coordinate at a bound
/// whose gradient points out of the box stays there; a step is clamped into the box). Marquardt's
/// scaling by the diagonal of JᵀJ; λ falls tenfold after a step that lowers the loss and rises
/// tenfold after one that does not. Stops when a step gains less than 1e-12 of the loss, moves no
/// coordinate by 1e-9, or λ passes 1e10.
void levenberg_marquardt(gpu_problem& problem) {
  const Eigen::Index n = problem.size();
  Eigen::VectorXd u = problem.coordinates();
  Eigen::VectorXd r = problem.residuals();
  double loss = r.squaredNorm();
  double lambda = 1e-3;
  for (int iteration = 0; iteration < 200 && lambda < 1e10; ++iteration) {
    const Eigen::MatrixXd J = problem.jacobian(r);
    const Eigen::MatrixXd A = J.transpose() * J;
    const Eigen::VectorXd g = J.transpose() * r;
    std::vector<Eigen::Index> free;
    for (Eigen::Index j = 0; j < n; ++j) {
      const bool held = (u[j] <= 0.0 && g[j] > 0.0) || (u[j] >= 1.0 && g[j] < 0.0);
      if (!held) free.push_back(j);
    }
    if (free.empty()) break;
    const auto m = static_cast<Eigen::Index>(free.size());
    Eigen::MatrixXd Af(m, m);
    Eigen::VectorXd gf(m);
    double largest = 0;
    for (Eigen::Index a = 0; a < m; ++a) {
      gf[a] = g[free[static_cast<std::size_t>(a)]];
      for (Eigen::Index b = 0; b < m; ++b) Af(a, b) = A(free[static_cast<std::size_t>(a)], free[static_cast<std::size_t>(b)]);
      largest = std::max(largest, Af(a, a));
    }
    // A coordinate no residual moves gets a floor, so that the damped system stays definite.
    const double floor = std::max(largest * 1e-9, 1e-12);
    bool accepted = false;
    bool converged = false;
    while (!accepted && lambda < 1e10) {
      Eigen::MatrixXd damped = Af;
      for (Eigen::Index a = 0; a < m; ++a) damped(a, a) += lambda * std::max(Af(a, a), floor);
      const Eigen::VectorXd step = damped.ldlt().solve(-gf);
      Eigen::VectorXd next = u;
      for (Eigen::Index a = 0; a < m; ++a) {
        const Eigen::Index j = free[static_cast<std::size_t>(a)];
        next[j] = std::clamp(u[j] + step[a], 0.0, 1.0);
      }
      if ((next - u).lpNorm<Eigen::Infinity>() < 1e-9) {
        converged = true;
        break;
      }
      problem.move_to(next);
      Eigen::VectorXd next_r = problem.residuals();
      const double next_loss = next_r.squaredNorm();
      if (next_loss < loss) {
        accepted = true;
        converged = loss - next_loss <= 1e-12 * loss;
        u = std::move(next);
        r = std::move(next_r);
        loss = next_loss;
        lambda = std::max(lambda / 10, 1e-12);
      } else {
        problem.move_to(u);
        lambda *= 10;
      }
    }
    if (converged || !accepted) break;
  }
  problem.move_to(u);
}

/// The k-th point (from 1) of the Halton sequence in `dims` dimensions: a deterministic spread
/// over the unit box.
Eigen::VectorXd halton(int k, Eigen::Index dims) {
  static constexpr std::array<int, 24> primes{2,  3,  5,  7,  11, 13, 17, 19, 23, 29, 31, 37,
                                              41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89};
  Eigen::VectorXd x(dims);
  for (Eigen::Index d = 0; d < dims; ++d) {
    const int base = primes[static_cast<std::size_t>(d) % primes.size()];
    double f = 1;
    double v = 0;
    for (int i = k + static_cast<int>(d / static_cast<Eigen::Index>(primes.size())) * 7; i > 0; i /= base) {
      f /= base;
      v += f * (i % base);
    }
    x[d] = v;
  }
  return x;
}

/// Levenberg–Marquardt from the tables' values and from `starts` more points spread over the box,
/// keeping the lowest loss. The loss has several basins (the gap overrun's max(0, ·) and the
/// clamped shares make it piecewise; on the H100 the MPS loss and capacity trade against each
/// other): from the tables alone the H100's fit stops at a loss 12% above the best, and the A100's
/// 57% above. 32 starts find the lowest loss that 128 find on all three GPU types, to 3e-4.
void fit_from_starts(gpu_problem& problem, int starts) {
  levenberg_marquardt(problem);
  Eigen::VectorXd best = problem.coordinates();
  double best_loss = problem.residuals().squaredNorm();
  for (int k = 1; k <= starts; ++k) {
    problem.move_to(halton(k, problem.size()));
    levenberg_marquardt(problem);
    const double loss = problem.residuals().squaredNorm();
    if (loss < best_loss) {
      best_loss = loss;
      best = problem.coordinates();
    }
  }
  problem.move_to(best);
}

/// Each parameter's status and, for the estimated ones, its standard error and correlations: the
/// covariance s²·(JᵀJ)⁻¹ of the coordinates, over the data rows (the prior only breaks ties), with
/// s² = RSS / (n − p) and p the parameters inside their bounds.
void estimate_errors(gpu_problem& problem) {
  auto& params = problem.params();
  const Eigen::VectorXd r = problem.residuals();
  const Eigen::MatrixXd J = problem.jacobian(r).topRows(problem.data_rows());
  const double rss = r.head(problem.data_rows()).squaredNorm();
  std::vector<Eigen::Index> free;
  for (Eigen::Index j = 0; j < problem.size(); ++j) {
    auto& p = params[static_cast<std::size_t>(j)];
    // Within a millionth of its range of a bound: held there.
    if (p.u <= 1e-6 || p.u >= 1 - 1e-6) {
      p.id.status = estimate_status::at_bound;
    } else {
      free.push_back(j);
    }
  }
  const auto dof = problem.data_rows() - static_cast<Eigen::Index>(free.size());
  if (dof <= 0) {
    for (Eigen::Index j : free) params[static_cast<std::size_t>(j)].id.status = estimate_status::not_identified;
    return;
  }
  const double s2 = rss / static_cast<double>(dof);
  // Drop the parameter that dominates the least-determined direction while that direction's
  // standard error spans more than a whole range (a coordinate's range is 1).
  while (!free.empty()) {
    const auto m = static_cast<Eigen::Index>(free.size());
    Eigen::MatrixXd Jf(J.rows(), m);
    for (Eigen::Index a = 0; a < m; ++a) Jf.col(a) = J.col(free[static_cast<std::size_t>(a)]);
    const Eigen::MatrixXd M = Jf.transpose() * Jf;
    const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(M);
    const double smallest = eig.eigenvalues()[0];
    if (smallest > s2) {
      const Eigen::MatrixXd cov =
          s2 * eig.eigenvectors() * eig.eigenvalues().cwiseInverse().asDiagonal() * eig.eigenvectors().transpose();
      for (Eigen::Index a = 0; a < m; ++a) {
        auto& p = params[static_cast<std::size_t>(free[static_cast<std::size_t>(a)])];
        p.id.status = estimate_status::estimated;
        p.id.standard_error = std::sqrt(cov(a, a)) * std::abs(p.range.slope_at(p.range.value_at(p.u)));
        for (Eigen::Index b = 0; b < m; ++b) {
          p.id.correlations.push_back(cov(a, b) / std::sqrt(cov(a, a) * cov(b, b)));
        }
      }
      return;
    }
    Eigen::Index worst = 0;
    eig.eigenvectors().col(0).cwiseAbs().maxCoeff(&worst);
    params[static_cast<std::size_t>(free[static_cast<std::size_t>(worst)])].id.status = estimate_status::not_identified;
    free.erase(free.begin() + worst);
  }
}

}  // namespace

std::string_view to_string(estimate_status s) noexcept {
  switch (s) {
    case estimate_status::estimated: return "estimated";
    case estimate_status::at_bound: return "at bound";
    case estimate_status::not_identified: return "not identified";
  }
  return "";
}

bool fittable(const measured_pair& cell) {
  const auto traits = any_rate_controller::traits_of_policy(cell.policy);
  return traits && !traits->adaptive && traits->co_locates && (cell.production || cell.opportunistic);
}

fit_result fit_catalog(const catalog& c, const fit_options& options) {
  catalog work = c;
  fit_result out;
  double sum = 0;
  for (const auto& g : work.gpus) {
    if (!options.gpu.empty() && g.name != options.gpu) continue;
    std::vector<fit_cell> cells;
    for (const auto& m : work.measurements) {
      if (m.gpu != g.name || !fittable(m)) continue;
      if (std::find(options.exclude.begin(), options.exclude.end(), m.pair_key()) != options.exclude.end()) {
        continue;
      }
      const rate_policy_traits traits = policy_traits(m.policy);
      cells.push_back({&m, request_of(m), traits.mechanism,
                       m.memory_policy.empty() ? std::string(traits.default_memory_policy) : m.memory_policy});
    }
    if (cells.empty()) continue;

    // The parameters the cells identify.
    std::vector<search_param> params;
    auto add = [&](const std::string& model, target_kind kind, auto&& affects) {
      fit_parameter id{g.name, model, std::string(name_of(kind)), 0};
      search_param p{id, kind, range_of(work, id, kind), !model.empty()};
      for (std::size_t i = 0; i < cells.size(); ++i) {
        if (affects(cells[i])) p.cells.push_back(i);
      }
      if (p.cells.empty()) return;
      p.start_u = p.u = p.range.coordinate_of(get(work, p.id, kind));
      params.push_back(std::move(p));
    };
    auto both_run = [](const fit_cell& f) {
      return !f.cell->production_idle && !f.cell->opportunistic_model.empty();
    };
    add("", target_kind::switch_loss, [&](const fit_cell& f) {
      return f.mode == compute_mode::time_slicing && both_run(f);
    });
    // The gap overrun reads the jobs' kernels and idle gaps: fitted from the cells whose two
    // profiles measure them (none on a GPU type whose rows are estimates: it stays off there).
    auto gaps_measured = [&](const std::string& model) {
      const model_profile* m = work.find_model(model, g.name);
      return m != nullptr && m->origin_of(profile_field::gaps_per_iteration) == provenance::measured &&
             m->origin_of(profile_field::kernels_per_iteration) == provenance::measured;
    };
    add("", target_kind::overrun_switch, [&](const fit_cell& f) {
      return f.mode == compute_mode::time_slicing && both_run(f) &&
             gaps_measured(f.cell->production_model) && gaps_measured(f.cell->opportunistic_model);
    });
    add("", target_kind::mps_switch_loss, [&](const fit_cell& f) { return f.mode == compute_mode::mps && both_run(f); });
    add("", target_kind::mps_capacity, [&](const fit_cell& f) { return f.mode == compute_mode::mps && both_run(f); });
    add("", target_kind::mps_priority_loss, [&](const fit_cell& f) {
      return f.mode == compute_mode::mps && both_run(f) && below_normal(*f.cell);
    });
    const std::array thrash{target_kind::thrash_time_slicing, target_kind::thrash_mps, target_kind::thrash_mig};
    for (std::size_t k = 0; k < compute_mode_count; ++k) {
      add("", thrash[k], [&](const fit_cell& f) {
        return static_cast<std::size_t>(f.mode) == k && overflows(work, f);
      });
    }
    for (const auto& m : work.models) {
      if (m.gpu != g.name) continue;
      auto fitted = [&](profile_field f) { return m.origin_of(f) == provenance::fitted; };
      auto with = [&](const fit_cell& f) { return involves(*f.cell, m.model); };
      if (fitted(profile_field::busy_fraction)) add(m.model, target_kind::busy_fraction, with);
      if (fitted(profile_field::blocks_per_iteration)) {
        add(m.model, target_kind::blocks_per_iteration, [&](const fit_cell& f) {
          const auto t = any_rate_controller::traits_of_policy(f.cell->policy);
          return f.cell->opportunistic_model == m.model && t && t->fixed_block_budget;
        });
      }
      if (fitted(profile_field::hot_set)) {
        add(m.model, target_kind::hot_set, [&](const fit_cell& f) {
          return f.cell->opportunistic_model == m.model &&
                 any_memory_policy::paging_of_policy(f.memory_policy) == memory_paging::policy_eviction;
        });
      }
      if (fitted(profile_field::slice_sensitivity)) {
        add(m.model, target_kind::slice_sensitivity, [&](const fit_cell& f) {
          const bool opp = f.cell->opportunistic_model == m.model;
          return with(f) && (f.mode == compute_mode::mig ||
                             (f.mode == compute_mode::mps && opp &&
                              setting_or(*f.cell, "mps.opportunistic-threads", 1.0) < 1.0));
        });
      }
    }

    gpu_problem problem(work, std::move(cells), std::move(params));
    problem.move_to(problem.coordinates());
    fit_from_starts(problem, 32);
    estimate_errors(problem);
    // Correlations index the estimated parameters of this GPU type in result order.
    for (auto& p : problem.params()) {
      p.id.value = p.range.value_at(p.u);
      out.parameters.push_back(p.id);
    }
    const Eigen::VectorXd r = problem.residuals();
    sum += r.head(problem.data_rows()).squaredNorm();
    out.cells += static_cast<std::size_t>(problem.data_rows());
  }
  out.rms_error = out.cells > 0 ? std::sqrt(sum / static_cast<double>(out.cells)) : 0.0;
  return out;
}

std::vector<double> propagate_fit_error(const catalog& fitted, const fit_result& fit, const std::string& gpu,
                                        const std::function<std::vector<double>(const catalog&)>& outputs) {
  catalog work = fitted;
  std::vector<const fit_parameter*> estimated;
  for (const auto& p : fit.parameters) {
    if (p.gpu == gpu && p.status == estimate_status::estimated && p.standard_error) estimated.push_back(&p);
  }
  std::vector<double> variance;
  // Each estimated parameter's effect on every output per unit of the parameter.
  std::vector<std::vector<double>> slope;
  for (const fit_parameter* p : estimated) {
    const auto kind = kind_named(p->name);
    if (!kind || work.find_gpu(p->gpu) == nullptr ||
        (!p->model.empty() && work.find_model(p->model, p->gpu) == nullptr)) {
      throw input_error(fmt::format("fit parameter {} {} {} is not in the catalog", p->gpu, p->model, p->name));
    }
    const parameter_range range = range_of(work, *p, *kind);
    const double up = std::min(range.hi, p->value + *p->standard_error);
    const double down = std::max(range.lo, p->value - *p->standard_error);
    set(work, *p, *kind, up);
    const std::vector<double> high = outputs(work);
    set(work, *p, *kind, down);
    const std::vector<double> low = outputs(work);
    set(work, *p, *kind, p->value);
    std::vector<double> s(high.size(), 0.0);
    for (std::size_t k = 0; k < high.size() && k < low.size(); ++k) {
      s[k] = up > down ? (high[k] - low[k]) / (up - down) : 0.0;
    }
    slope.push_back(std::move(s));
  }
  const std::size_t outputs_n = slope.empty() ? outputs(work).size() : slope.front().size();
  variance.assign(outputs_n, 0.0);
  for (std::size_t a = 0; a < estimated.size(); ++a) {
    for (std::size_t b = 0; b < estimated.size(); ++b) {
      const double rho = b < estimated[a]->correlations.size() ? estimated[a]->correlations[b] : (a == b ? 1.0 : 0.0);
      const double cov = rho * *estimated[a]->standard_error * *estimated[b]->standard_error;
      for (std::size_t k = 0; k < outputs_n; ++k) variance[k] += slope[a][k] * cov * slope[b][k];
    }
  }
  for (double& v : variance) v = std::sqrt(std::max(v, 0.0));
  return variance;
}

void apply_fit(catalog& c, const fit_result& fit) {
  for (const auto& p : fit.parameters) {
    const auto kind = kind_named(p.name);
    if (!kind) continue;
    if (c.find_gpu(p.gpu) == nullptr) continue;
    if (!p.model.empty() && c.find_model(p.model, p.gpu) == nullptr) continue;
    set(c, p, *kind, p.value);
  }
}

std::string render_fit_csv(const fit_result& fit) {
  std::string out =
      "# The global fit of the simulator's mechanism parameters (`tgs-sim fit --write "
      "sim/data/fit.csv`):\n"
      "# each GPU type's parameters and the profile fields marked f in models.csv, fitted to the\n"
      "# measured cells of the policies that do not adapt. tgs-sim uses it while inputs_hash matches\n"
      "# the tables (gpus.csv, models.csv, the measured pairs); otherwise it fits afresh.\n"
      "# standard_error: in the value's unit, or \"at bound\" / \"not identified\"; correlations: with\n"
      "# each estimated parameter of the same GPU type, in file order (the intervals of predictions).\n"
      "gpu,model,parameter,value,standard_error,correlations\n";
  out += fmt::format("*,,inputs_hash,{:016x},,\n*,,cells,{},,\n*,,rms_error,{:.6f},,\n", fit.inputs_hash,
                     fit.cells, fit.rms_error);
  for (const auto& p : fit.parameters) {
    std::string correlations;
    for (double r : p.correlations) correlations += fmt::format("{}{:.9g}", correlations.empty() ? "" : " ", r);
    out += fmt::format("{},{},{},{:.9g},{},{}\n", p.gpu, p.model, p.name, p.value,
                       p.standard_error ? fmt::format("{:.9g}", *p.standard_error) : std::string(to_string(p.status)),
                       correlations);
  }
  return out;
}

fit_result parse_fit_csv(std::string_view text, std::string_view origin) {
  constexpr std::string_view header_line = "gpu,model,parameter,value,standard_error,correlations";
  fit_result out;
  std::size_t line_no = 0;
  bool header = false;
  auto number = [](std::string_view f, double& v) {
    const auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    return ec == std::errc{} && ptr == f.data() + f.size() && std::isfinite(v);
  };
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    std::vector<std::string_view> f;
    for (std::size_t start = 0;;) {
      const std::size_t comma = line.find(',', start);
      f.push_back(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    auto fail = [&](std::string_view what) {
      return input_error(fmt::format("{}:{}: {}, got \"{}\"", origin, line_no, what, line));
    };
    if (!header) {
      if (line != header_line) throw fail(fmt::format("expected the header \"{}\"", header_line));
      header = true;
      continue;
    }
    if (f.size() != 6) throw fail("expected 6 comma-separated fields");
    if (f[0] == "*" && f[2] == "inputs_hash") {
      const auto [ptr, ec] = std::from_chars(f[3].data(), f[3].data() + f[3].size(), out.inputs_hash, 16);
      if (ec != std::errc{} || ptr != f[3].data() + f[3].size()) throw fail("expected a hexadecimal hash");
      continue;
    }
    double v = 0;
    if (!number(f[3], v)) throw fail("expected a number");
    if (f[0] == "*") {
      if (f[2] == "cells") out.cells = static_cast<std::size_t>(v);
      if (f[2] == "rms_error") out.rms_error = v;
      continue;
    }
    if (!kind_named(f[2])) throw fail("unknown parameter");
    fit_parameter p{std::string(f[0]), std::string(f[1]), std::string(f[2]), v};
    double se = 0;
    if (f[4] == to_string(estimate_status::at_bound)) {
      p.status = estimate_status::at_bound;
    } else if (f[4] == to_string(estimate_status::not_identified)) {
      p.status = estimate_status::not_identified;
    } else if (number(f[4], se) && se >= 0) {
      p.standard_error = se;
      for (std::size_t start = 0; start < f[5].size();) {
        const std::size_t space = std::min(f[5].find(' ', start), f[5].size());
        double r = 0;
        if (!number(f[5].substr(start, space - start), r) || std::abs(r) > 1 + 1e-6) {
          throw fail("expected correlations between -1 and 1, separated by spaces");
        }
        p.correlations.push_back(r);
        start = space + 1;
      }
    } else {
      throw fail("expected a standard error, \"at bound\" or \"not identified\"");
    }
    if (p.status != estimate_status::estimated && !f[5].empty()) throw fail("correlations of a parameter not estimated");
    out.parameters.push_back(std::move(p));
  }
  if (!header) throw input_error(fmt::format("{}: empty table (no header line)", origin));
  // Each estimated parameter has one correlation per estimated parameter of its GPU type.
  for (const auto& p : out.parameters) {
    if (p.status != estimate_status::estimated) continue;
    const auto n = static_cast<std::size_t>(std::count_if(out.parameters.begin(), out.parameters.end(), [&](const fit_parameter& q) {
      return q.gpu == p.gpu && q.status == estimate_status::estimated;
    }));
    if (p.correlations.size() != n) {
      throw input_error(fmt::format("{}: {} {} {} has {} correlations, expected {} (the estimated parameters of {})",
                                    origin, p.gpu, p.model, p.name, p.correlations.size(), n, p.gpu));
    }
  }
  return out;
}

}  // namespace tgs::sim
