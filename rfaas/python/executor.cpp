#include "executor.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <new>

#include "errors.hpp"

namespace py = pybind11;

namespace rfaas::python {

namespace {

/// The output of a call without an output buffer: at most the allocation's
/// max_output_size.
std::vector<unsigned char> output_room(rfaas::executor &ex) {
  return std::vector<unsigned char>(ex.max_output_size());
}

/// Every entry point refuses an executor without an allocation the same way
/// librfaas does (rfaas.Error, phase usage), before touching buffers.
void require_allocated(rfaas::executor &ex) {
  if (!ex.allocated())
    throw rfaas::Error(phase::usage, "", status::invalid_argument,
                       "the executor has no allocation: call allocate() first");
}

/// A registered block, freed through its executor when NumPy drops the array.
struct registered_block {
  std::shared_ptr<executor_state> owner;
  void *data;
};

} // namespace

executor::~executor() {
  // The allocation ends with the Python object, also when registered arrays
  // or futures still share the state (they keep only its memory and its
  // network open). Deallocating takes network round trips: without the GIL.
  py::gil_scoped_release unlocked;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->ex.deallocate();
  }
  state_.reset();
}

void executor::allocate(const rfaas::server &manager, const rfaas::allocation_options &options) {
  py::gil_scoped_release unlocked;
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->ex.allocate(manager, options);
}

void executor::close() {
  py::gil_scoped_release unlocked;
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->ex.deallocate();
}

py::object executor::execute(const std::string &function, py::handle input, py::handle output,
                             std::optional<double> timeout) {
  require_allocated(state_->ex);
  buffer_view in(input, false, "input");
  buffer_view out;
  std::vector<unsigned char> owned;
  rfaas::mutable_buffer target;
  if (output.is_none()) {
    owned = output_room(state_->ex);
    target = rfaas::mutable_buffer(owned.data(), owned.size());
  } else {
    out = buffer_view(output, true, "output");
    target = rfaas::mutable_buffer(out.data(), out.size());
  }
  rfaas::result r;
  {
    py::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> lock(state_->mutex);
    rfaas::const_buffer source(in.data(), in.size());
    if (timeout)
      r = state_->ex.execute(function, source, target,
                             std::chrono::milliseconds(static_cast<int64_t>(*timeout * 1000)));
    else
      r = state_->ex.execute(function, source, target);
  }
  if (!r.ok())
    raise_invocation_error(r, function);
  if (output.is_none())
    return py::bytes(reinterpret_cast<const char *>(owned.data()), r.output_size);
  return py::int_(r.output_size);
}

std::unique_ptr<future> executor::submit(const std::string &function, py::handle input,
                                         py::handle output) {
  require_allocated(state_->ex);
  buffer_view in(input, false, "input");
  buffer_view out;
  std::vector<unsigned char> owned;
  if (output.is_none())
    owned = output_room(state_->ex);
  else
    out = buffer_view(output, true, "output");
  auto f =
      std::make_unique<future>(state_, function, std::move(in), std::move(out), std::move(owned));
  f->start();
  return f;
}

py::list executor::execute_parallel(const std::string &function, py::sequence inputs,
                                    py::object outputs) {
  require_allocated(state_->ex);
  const size_t n = inputs.size();
  std::vector<buffer_view> in_views, out_views;
  std::vector<std::vector<unsigned char>> owned;
  std::vector<rfaas::const_buffer> sources;
  std::vector<rfaas::mutable_buffer> targets;
  in_views.reserve(n);
  sources.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    in_views.emplace_back(inputs[i], false, "input");
    sources.emplace_back(in_views.back().data(), in_views.back().size());
  }
  if (outputs.is_none()) {
    owned.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      owned.push_back(output_room(state_->ex));
      targets.emplace_back(owned.back().data(), owned.back().size());
    }
  } else {
    py::sequence outs = outputs.cast<py::sequence>();
    if (outs.size() != n)
      throw py::value_error("execute_parallel: " + std::to_string(n) + " inputs but " +
                            std::to_string(outs.size()) + " outputs");
    out_views.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      out_views.emplace_back(outs[i], true, "output");
      targets.emplace_back(out_views.back().data(), out_views.back().size());
    }
  }
  std::vector<rfaas::result> results;
  {
    py::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> lock(state_->mutex);
    results = state_->ex.execute_parallel(function, sources, targets);
  }
  py::list values;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok()) {
      rfaas::result r = results[i];
      raise_invocation_error(r, function,
                             " (input " + std::to_string(i) + " of " + std::to_string(n) + ")");
    }
    if (outputs.is_none())
      values.append(
          py::bytes(reinterpret_cast<const char *>(owned[i].data()), results[i].output_size));
    else
      values.append(py::int_(results[i].output_size));
  }
  return values;
}

py::object executor::registered_array(py::object shape, py::object dtype, bool zero) {
  py::dtype dt = py::dtype::from_args(dtype);
  std::vector<py::ssize_t> dims;
  if (py::isinstance<py::int_>(shape))
    dims.push_back(shape.cast<py::ssize_t>());
  else
    dims = shape.cast<std::vector<py::ssize_t>>();
  size_t count = 1;
  for (py::ssize_t d : dims) {
    if (d < 0)
      throw py::value_error("negative dimensions are not allowed");
    count *= static_cast<size_t>(d);
  }
  const size_t bytes = count * static_cast<size_t>(dt.itemsize());
  // A block of at least one byte, so that an empty array still owns one.
  void *p = state_->ex.allocate_registered(bytes ? bytes : 1);
  if (zero)
    std::memset(p, 0, bytes);
  auto *block = new registered_block{state_, p};
  py::capsule owner(block, [](void *raw) {
    auto *b = static_cast<registered_block *>(raw);
    b->owner->ex.free_registered(b->data);
    delete b;
  });
  return py::array(dt, dims, p, owner);
}

future::future(std::shared_ptr<executor_state> state, std::string function, buffer_view input,
               buffer_view output, std::vector<unsigned char> owned_output)
    : state_(std::move(state)), function_(std::move(function)), input_(std::move(input)),
      output_(std::move(output)), owned_output_(std::move(owned_output)) {}

future::~future() {
  // An uncollected invocation is abandoned: librfaas then never writes its
  // late result into the output, so the buffers can go back to Python.
  if (pending_.valid()) {
    py::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> lock(state_->mutex);
    pending_ = rfaas::async_result();
  }
}

void future::start() {
  rfaas::const_buffer source(input_.data(), input_.size());
  rfaas::mutable_buffer target =
      output_ ? rfaas::mutable_buffer(output_.data(), output_.size())
              : rfaas::mutable_buffer(owned_output_.data(), owned_output_.size());
  py::gil_scoped_release unlocked;
  std::lock_guard<std::mutex> lock(state_->mutex);
  pending_ = state_->ex.async(function_, source, target);
}

py::object future::result() {
  if (!collected_) {
    py::gil_scoped_release unlocked;
    // Two threads may wait for the same future: the first collects.
    std::lock_guard<std::mutex> once(collect_mutex_);
    if (!collected_) {
      std::lock_guard<std::mutex> lock(state_->mutex);
      result_ = pending_.get();
      collected_ = true;
    }
  }
  // The memory is no longer read: give the input back to its exporter (a
  // NumPy array can be resized again).
  input_.release();
  if (!result_.ok())
    raise_invocation_error(result_, function_);
  if (!output_)
    return py::bytes(reinterpret_cast<const char *>(owned_output_.data()), result_.output_size);
  return py::int_(result_.output_size);
}

} // namespace rfaas::python
