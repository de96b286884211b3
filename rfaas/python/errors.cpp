#include "errors.hpp"

#include <cstdio>

namespace py = pybind11;

namespace rfaas::python {

namespace {

// Owned by the module (added as its attributes); these are borrowed
// pointers kept for the translators, valid for the interpreter's life.
PyObject *error_type = nullptr;
PyObject *invocation_error_type = nullptr;

/// Raise `type(message)` with extra attributes set on the instance.
void raise_with(PyObject *type, const std::string &message, const py::dict &attributes) {
  py::object instance = py::reinterpret_borrow<py::object>(type)(message);
  for (auto item : attributes)
    py::setattr(instance, item.first, item.second);
  PyErr_SetObject(type, instance.ptr());
}

} // namespace

std::string describe_failure(const rfaas::result &r, const std::string &function,
                             const std::string &which) {
  std::string text = "rfaas: invocation of \"" + function + "\"" + which +
                     " failed: " + rfaas::to_string(r.status);
  char hex[16];
  switch (r.status) {
  case status::unknown_function:
    std::snprintf(hex, sizeof hex, "%08x", r.detail);
    text += " (the shipped library exports no function of that name; name hash 0x" +
            std::string(hex) + ")";
    break;
  case status::payload_too_large:
    text += " (the largest input of this allocation is " + std::to_string(r.detail) + " bytes)";
    break;
  case status::output_too_large:
    text += " (the function produced " + std::to_string(r.detail) +
            " bytes, more than the output buffer or the allocation's max_output_size)";
    break;
  case status::function_crashed:
    text += " (signal " + std::to_string(r.detail) + ")";
    break;
  case status::busy:
    text += " (every input slot is in flight: allocate with more slots or collect results)";
    break;
  case status::closed:
    text += " (the executor is gone: allocate again)";
    break;
  default:
    break;
  }
  return text;
}

void raise_invocation_error(const rfaas::result &r, const std::string &function,
                            const std::string &which) {
  py::dict attributes;
  attributes["phase"] = "invocation";
  attributes["status"] = rfaas::to_string(r.status);
  attributes["manager"] = "";
  attributes["detail"] = r.detail;
  attributes["function"] = function;
  raise_with(invocation_error_type, describe_failure(r, function, which), attributes);
  throw py::error_already_set();
}

void register_errors(py::module_ &m) {
  error_type = PyErr_NewExceptionWithDoc(
      "rfaas.Error",
      "A failure of librfaas: the message names the phase, the manager and the status.\n"
      "Attributes: phase, status (str), manager (\"host:port\" or \"\").",
      PyExc_RuntimeError, nullptr);
  invocation_error_type = PyErr_NewExceptionWithDoc(
      "rfaas.InvocationError",
      "An invocation that did not succeed. Attributes: status (str), detail (int),\n"
      "function (str); phase is \"invocation\".",
      error_type, nullptr);
  if (!error_type || !invocation_error_type)
    throw py::error_already_set();
  // The module owns one reference each (PyModule_AddObject steals it).
  m.add_object("Error", py::reinterpret_borrow<py::object>(error_type));
  m.add_object("InvocationError", py::reinterpret_borrow<py::object>(invocation_error_type));

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const rfaas::Error &e) {
      py::dict attributes;
      attributes["phase"] = rfaas::to_string(e.where());
      attributes["status"] = rfaas::to_string(e.code());
      attributes["manager"] = e.manager();
      raise_with(error_type, e.what(), attributes);
    }
  });
}

} // namespace rfaas::python
