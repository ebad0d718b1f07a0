// SPDX-License-Identifier: Apache-2.0
/// @file
/// What the parts of the Python extension share: reading Python values with messages that name
/// the key, numpy columns, times in seconds, and the module's exception types.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tgs/core/units.hpp"

namespace tgs::python {

namespace py = pybind11;
using namespace pybind11::literals;

/// The Python exception types of the module, created in `register_errors`.
struct error_types {
  py::object input_error;   ///< tgs.InputError (a ValueError)
  py::object config_error;  ///< tgs.ConfigError (an InputError)
  py::object trace_error;   ///< tgs.TraceError (an InputError with `file` and `line`)
};
const error_types& errors();

/// Creates the exception types in `m` and translates the library's exceptions into them.
void register_errors(py::module_& m);

/// Raises tgs.InputError with `message` (by throwing what the translator turns into it).
[[noreturn]] void fail(const std::string& message);

/// Python's repr of `value`, for messages.
[[nodiscard]] std::string repr_of(py::handle value);

/// `value` is a Python bool, int or float that is not a bool: a number a setting may take.
[[nodiscard]] bool is_number(py::handle value);

/// The value as a float; fails naming `what` unless it is a number (not a bool).
[[nodiscard]] double to_double(py::handle value, std::string_view what);
/// The value as an unsigned integer; fails naming `what` for a float, a bool or a negative.
[[nodiscard]] std::uint64_t to_count(py::handle value, std::string_view what);
/// The value as a signed integer; fails naming `what` for a float or a bool.
[[nodiscard]] std::int64_t to_integer(py::handle value, std::string_view what);
/// The value as a bool; fails naming `what` for anything else.
[[nodiscard]] bool to_bool(py::handle value, std::string_view what);
/// The value as a string; fails naming `what` for anything else.
[[nodiscard]] std::string to_text(py::handle value, std::string_view what);

/// The keys of `dict` that are not among `known`: fails naming the first and listing `known`.
void refuse_unknown_keys(const py::dict& dict, std::string_view what,
                         const std::vector<std::string_view>& known);
/// `value` as a dict; fails naming `what` otherwise.
[[nodiscard]] py::dict to_dict(py::handle value, std::string_view what);

/// Seconds since the driver's epoch as an instant, and back (`never` is None).
[[nodiscard]] instant instant_of(double seconds);
[[nodiscard]] py::object seconds_or_none(instant t);

/// Numpy columns.
[[nodiscard]] py::array_t<double> float_column(const std::vector<double>& values);
[[nodiscard]] py::array_t<std::int64_t> int_column(const std::vector<std::int64_t>& values);
[[nodiscard]] py::array_t<bool> bool_column(const std::vector<bool>& values);
[[nodiscard]] py::object text_column(const std::vector<std::string>& values);

/// NaN for an empty value.
[[nodiscard]] double or_nan(const std::optional<double>& value);
/// None for an empty value.
[[nodiscard]] py::object or_none(const std::optional<double>& value);

/// Parts of the module, each in its own source file.
void define_policies(py::module_& m);
void define_traces(py::module_& m);
void define_runs(py::module_& m);

}  // namespace tgs::python
