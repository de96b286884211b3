// rfaas.Executor and rfaas.Future: librfaas's executor for Python.
//
// Threads: librfaas's executor is used by one thread at a time, and an
// async_result must be collected on the thread that uses it. Python code may
// call from several threads (asyncio awaits run in a thread pool), so every
// call takes the executor's mutex, after releasing the GIL (a thread that
// holds the mutex never waits for the GIL, so the two cannot deadlock).
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <rfaas/executor.hpp>

#include "buffer_view.hpp"

namespace rfaas::python {

/// The executor and its lock, shared by rfaas.Executor, its futures and the
/// NumPy arrays of registered memory (they free their block through it, so
/// the executor outlives them and never moves).
struct executor_state {
  executor_state(const rfaas::device &dev, const rfaas::timeouts &t) : ex(dev, t) {}
  std::mutex mutex;
  rfaas::executor ex;
};

class future;

class executor {
public:
  executor(const rfaas::device &dev, const rfaas::timeouts &t)
      : state_(std::make_shared<executor_state>(dev, t)) {}
  /// Deallocates (without the GIL); the state lives on while arrays or
  /// futures hold it.
  ~executor();
  executor(const executor &) = delete;
  executor &operator=(const executor &) = delete;

  void allocate(const rfaas::server &manager, const rfaas::allocation_options &options);
  void close();

  /// Synchronous: the output's byte count when `output` is given, else the
  /// output as bytes.
  pybind11::object execute(const std::string &function, pybind11::handle input,
                           pybind11::handle output, std::optional<double> timeout);
  /// Starts the invocation and returns its rfaas.Future.
  std::unique_ptr<future> submit(const std::string &function, pybind11::handle input,
                                 pybind11::handle output);
  /// One invocation per input, over every worker and slot.
  pybind11::list execute_parallel(const std::string &function, pybind11::sequence inputs,
                                  pybind11::object outputs);

  /// A NumPy array of `shape` and `dtype` in registered memory: as an input
  /// it is written without a copy, as an output the worker writes into it.
  pybind11::object registered_array(pybind11::object shape, pybind11::object dtype, bool zero);

  rfaas::executor &get() { return state_->ex; }
  std::mutex &mutex() { return state_->mutex; }
  const std::shared_ptr<executor_state> &state() const { return state_; }

private:
  std::shared_ptr<executor_state> state_;
};

/// The pending result of Executor.submit(), like concurrent.futures.Future:
/// result() waits (GIL released) and returns the output's byte count, or the
/// output bytes when no output was given; it raises rfaas.InvocationError for
/// a failed invocation. It is awaitable from asyncio.
class future {
public:
  future(std::shared_ptr<executor_state> state, std::string function, buffer_view input,
         buffer_view output, std::vector<unsigned char> owned_output);
  ~future();

  /// Posts the invocation (GIL released, executor locked).
  void start();
  pybind11::object result();
  /// True once result() has collected the outcome (nothing polls before).
  bool done() const noexcept { return collected_; }

private:
  std::shared_ptr<executor_state> state_;
  std::string function_;
  buffer_view input_, output_;
  // Output memory when the caller gave none (result() returns it as bytes).
  std::vector<unsigned char> owned_output_;
  rfaas::async_result pending_;
  rfaas::result result_{};
  std::mutex collect_mutex_;
  std::atomic<bool> collected_{false};
};

} // namespace rfaas::python
