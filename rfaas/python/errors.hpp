// Python exceptions of the rfaas module.
//
//   rfaas.Error(RuntimeError)      an rfaas::Error: what() is its message;
//                                  attributes phase, status, manager
//   rfaas.InvocationError(Error)   an invocation whose rfaas::result was not
//                                  ok; attributes status, detail, function
//                                  (phase is "invocation")
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include <rfaas/executor.hpp>

namespace rfaas::python {

/// Creates the exception classes in `m` and translates rfaas::Error from
/// then on. Call once, at import.
void register_errors(pybind11::module_ &m);

/// Raises rfaas.InvocationError for a result that is not ok (GIL held).
/// `function` names the call in the message, `which` (" (input 2 of 4)")
/// the call among several.
[[noreturn]] void raise_invocation_error(const rfaas::result &r, const std::string &function,
                                         const std::string &which = "");

/// The sentence that raise_invocation_error() uses: the status, and what
/// its detail means for that status.
std::string describe_failure(const rfaas::result &r, const std::string &function,
                             const std::string &which = "");

} // namespace rfaas::python
