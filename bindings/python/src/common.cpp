// SPDX-License-Identifier: Apache-2.0
// The Python extension's shared helpers: value checks, numpy columns, exceptions.
#include "common.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pybind11/stl.h>

#include <cmath>
#include <exception>

#include "tgs/core/config_error.hpp"
#include "tgs/sim/catalog.hpp"
#include "tgs/traces/trace.hpp"

namespace tgs::python {
namespace {

// Never destroyed: Python objects must not be released after the interpreter has finalized.
error_types* types = new error_types{};

py::object new_type(py::module_& m, const char* name, py::handle base, const char* doc) {
  const std::string qualified = std::string("tgs.") + name;
  auto type = py::reinterpret_steal<py::object>(
      PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base.ptr(), nullptr));
  if (!type) throw py::error_already_set();
  m.attr(name) = type;
  return type;
}

}  // namespace

const error_types& errors() {
  return *types;
}

std::string repr_of(py::handle value) {
  return py::repr(value).cast<std::string>();
}

void register_errors(py::module_& m) {
  types->input_error =
      new_type(m, "InputError", PyExc_ValueError,
               "Bad input: the message is the one tgs-sim prints (without its \"tgs-sim: \").");
  types->config_error = new_type(
      m, "ConfigError", types->input_error,
      "A policy's settings out of range: the message names the policy and the field, as the "
      "policy's constructor words it.");
  types->trace_error =
      new_type(m, "TraceError", types->input_error,
               "A malformed trace: the message names the file, the line and what was expected; the "
               "attributes `file` and `line` (0: the whole file) say where.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const traces::trace_error& e) {
      py::object error = types->trace_error(e.what());
      error.attr("file") = e.file();
      error.attr("line") = e.line();
      PyErr_SetObject(types->trace_error.ptr(), error.ptr());
    } catch (const config_error& e) {
      PyErr_SetString(types->config_error.ptr(), e.what());
    } catch (const sim::input_error& e) {
      PyErr_SetString(types->input_error.ptr(), e.what());
    }
  });
}

void fail(const std::string& message) {
  throw sim::input_error(message);
}

bool is_number(py::handle value) {
  if (PyBool_Check(value.ptr())) return false;
  return PyFloat_Check(value.ptr()) || PyIndex_Check(value.ptr());
}

double to_double(py::handle value, std::string_view what) {
  if (!is_number(value)) fail(fmt::format("{}: expected a number, got {}", what, repr_of(value)));
  if (PyFloat_Check(value.ptr())) return PyFloat_AsDouble(value.ptr());
  const double v =
      PyLong_AsDouble(py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr())).ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    fail(fmt::format("{}: {} is too large", what, repr_of(value)));
  }
  return v;
}

std::int64_t to_integer(py::handle value, std::string_view what) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr())) {
    fail(fmt::format("{}: expected an integer, got {}", what, repr_of(value)));
  }
  auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0) fail(fmt::format("{}: {} is out of range", what, repr_of(value)));
  return v;
}

std::uint64_t to_count(py::handle value, std::string_view what) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr())) {
    fail(fmt::format("{}: expected an integer, got {}", what, repr_of(value)));
  }
  auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (PyObject_RichCompareBool(index.ptr(), py::int_(0).ptr(), Py_LT) == 1) {
    // As the command line words a negative count.
    fail(fmt::format("{}: must not be negative, got {}", what, repr_of(value)));
  }
  const unsigned long long v = PyLong_AsUnsignedLongLong(index.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    fail(fmt::format("{}: {} is out of range", what, repr_of(value)));
  }
  return v;
}

bool to_bool(py::handle value, std::string_view what) {
  if (!PyBool_Check(value.ptr()))
    fail(fmt::format("{}: expected True or False, got {}", what, repr_of(value)));
  return value.ptr() == Py_True;
}

std::string to_text(py::handle value, std::string_view what) {
  if (!PyUnicode_Check(value.ptr()))
    fail(fmt::format("{}: expected a string, got {}", what, repr_of(value)));
  return value.cast<std::string>();
}

void refuse_unknown_keys(const py::dict& dict, std::string_view what,
                         const std::vector<std::string_view>& known) {
  for (const auto& [key, value] : dict) {
    const std::string name = PyUnicode_Check(key.ptr()) ? key.cast<std::string>() : repr_of(key);
    bool found = false;
    for (const auto k : known) found = found || k == name;
    if (!found) {
      fail(fmt::format("{}: unknown key \"{}\" (known: {})", what, name, fmt::join(known, ", ")));
    }
  }
}

py::dict to_dict(py::handle value, std::string_view what) {
  if (!PyDict_Check(value.ptr()))
    fail(fmt::format("{}: expected a dict, got {}", what, repr_of(value)));
  return py::reinterpret_borrow<py::dict>(value);
}

instant instant_of(double seconds) {
  // Nanoseconds in 64 bits reach about 292 years either side of the epoch.
  if (!(std::abs(seconds) < 9e9)) fail(fmt::format("time {} s is outside ±9e9 s", seconds));
  return epoch + from_seconds(seconds);
}

py::object seconds_or_none(instant t) {
  if (t == never) return py::none();
  return py::float_(to_seconds(t - epoch));
}

py::array_t<double> float_column(const std::vector<double>& values) {
  py::array_t<double> out(static_cast<py::ssize_t>(values.size()));
  std::copy(values.begin(), values.end(), out.mutable_data());
  return out;
}

py::array_t<std::int64_t> int_column(const std::vector<std::int64_t>& values) {
  py::array_t<std::int64_t> out(static_cast<py::ssize_t>(values.size()));
  std::copy(values.begin(), values.end(), out.mutable_data());
  return out;
}

py::array_t<bool> bool_column(const std::vector<bool>& values) {
  py::array_t<bool> out(static_cast<py::ssize_t>(values.size()));
  std::copy(values.begin(), values.end(), out.mutable_data());
  return out;
}

py::object text_column(const std::vector<std::string>& values) {
  // A numpy array of str: what pandas and matplotlib take as labels.
  return py::module_::import("numpy").attr("array")(py::cast(values), "dtype"_a = "str");
}

double or_nan(const std::optional<double>& value) {
  return value.value_or(std::nan(""));
}

py::object or_none(const std::optional<double>& value) {
  return value ? py::object(py::float_(*value)) : py::object(py::none());
}

}  // namespace tgs::python
