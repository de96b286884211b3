// The Python module `rfaas`: librfaas for Python programs (docs/python.md).
//
// Inputs and outputs are any C-contiguous object with the buffer protocol
// (bytes, bytearray, memoryview, numpy.ndarray), passed to librfaas by
// pointer: nothing is copied on the Python side. Arrays from
// Executor.empty()/zeros() live in memory registered with the executor, so
// librfaas copies nothing either (docs/python.md, "Zero copy").
// Every call that waits on the network releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

#include <rfaas/rfaas.hpp>

#include "errors.hpp"
#include "executor.hpp"

namespace py = pybind11;
using rfaas::python::executor;
using rfaas::python::future;

namespace {

std::chrono::milliseconds millis(double seconds) {
  if (seconds < 0)
    throw py::value_error("a timeout or duration cannot be negative");
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

/// The directory this module was loaded from (resolved), or "".
std::string module_directory() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void *>(&module_directory), &info) || !info.dli_fname)
    return "";
  char resolved[PATH_MAX];
  if (!realpath(info.dli_fname, resolved))
    return "";
  std::string path(resolved);
  return path.substr(0, path.rfind('/'));
}

/// The device database to read: the argument, else $RFAAS_DEVICES, else the
/// one installed with rFaaS (found relative to this module, so a moved
/// prefix still works), else, for the module of a build tree, the source
/// tree's config/devices.json.
std::string devices_path(const std::optional<std::string> &given) {
  if (given)
    return *given;
  if (const char *env = std::getenv("RFAAS_DEVICES"); env && *env)
    return env;
  const std::string here = module_directory();
  const std::string installed = here + "/" RFAAS_PYTHON_TO_DEVICES;
  if (!here.empty() && access(installed.c_str(), R_OK) == 0)
    return installed;
  char build[PATH_MAX];
  if (realpath(RFAAS_PYTHON_BUILD_DIR, build) && here == build)
    return RFAAS_PYTHON_SOURCE_DEVICES;
  throw rfaas::Error(rfaas::phase::configuration, "", rfaas::status::invalid_argument,
                     "no device database: pass devices=PATH or set RFAAS_DEVICES (" + installed +
                         " does not exist)");
}

rfaas::device find_device(const std::string &name, const std::optional<std::string> &devices) {
  return rfaas::device_database::load(devices_path(devices)).find(name);
}

rfaas::timeouts make_timeouts(double connect, double allocation, double invocation) {
  rfaas::timeouts t;
  t.connect = millis(connect);
  t.allocation = millis(allocation);
  t.workers = millis(allocation);
  t.ready = millis(allocation);
  t.invocation = millis(invocation);
  return t;
}

void allocate(executor &self, py::object manager, const std::string &library,
              std::optional<uint32_t> cores, uint32_t memory_mib, int32_t hot_timeout_ms,
              uint32_t max_input_size, uint32_t max_output_size, uint32_t slots, size_t part) {
  rfaas::allocation_options options;
  options.library = library;
  options.memory_mib = memory_mib;
  options.hot_timeout_ms = hot_timeout_ms;
  options.max_input_size = max_input_size;
  options.max_output_size = max_output_size;
  options.slots = slots;
  if (py::isinstance<rfaas::lease>(manager)) {
    const auto &l = manager.cast<const rfaas::lease &>();
    options.cores = cores.value_or(0); // 0: every core of the part
    rfaas::allocation_options leased = l.options(part, options);
    self.allocate(l.server(part), leased);
  } else {
    options.cores = cores.value_or(1);
    self.allocate(rfaas::server::parse(manager.cast<std::string>()), options);
  }
}

/// Reads the executor's state under its lock (another thread may be in a
/// call that changes it), without the GIL while waiting for the lock.
template <class F> auto locked(executor &self, F read) {
  py::gil_scoped_release unlocked;
  std::lock_guard<std::mutex> lock(self.mutex());
  return read(self.get());
}

py::dict copies(executor &self) {
  const rfaas::copy_counters c = locked(self, [](rfaas::executor &ex) { return ex.copies(); });
  py::dict d;
  d["inputs_in_place"] = c.inputs_in_place;
  d["inputs_copied"] = c.inputs_copied;
  d["results_in_place"] = c.results_in_place;
  d["results_copied"] = c.results_copied;
  d["targets_revoked"] = c.targets_revoked;
  return d;
}

py::dict cold_start(executor &self) {
  const rfaas::cold_start c =
      locked(self, [](rfaas::executor &ex) { return ex.cold_start_times(); });
  auto s = [](std::chrono::nanoseconds n) { return std::chrono::duration<double>(n).count(); };
  py::dict d;
  d["connected"] = s(c.connected);
  d["allocated"] = s(c.allocated);
  d["workers_connected"] = s(c.workers_connected);
  d["code_shipped"] = s(c.code_shipped);
  d["ready"] = s(c.ready);
  return d;
}

/// A resource-manager connection used from one Python thread at a time,
/// with the GIL released while it waits.
struct resource_manager {
  rfaas::resource_manager rm;
  std::mutex mutex;
};

} // namespace

PYBIND11_MODULE(rfaas, m) {
  m.doc() = "rFaaS client: lease remote cores, ship a function library, invoke functions "
            "over RDMA (docs/python.md)";
  m.attr("__version__") = RFAAS_PYTHON_VERSION;
  rfaas::python::register_errors(m);

  m.def(
      "set_log_level", [](const std::string &level) { rfaas::set_log_level(level); },
      py::arg("level"),
      "Level of librfaas's messages on stderr: trace, debug, info, warn (default, or "
      "$RFAAS_LOG_LEVEL), error, critical, off.");

  py::class_<rfaas::lease_part>(m, "LeasePart", "One node's share of a lease.")
      .def_readonly("node", &rfaas::lease_part::node)
      .def_property_readonly(
          "server", [](const rfaas::lease_part &p) { return p.server.endpoint(); },
          "\"host:port\" of the node's executor manager")
      .def_readonly("cores", &rfaas::lease_part::cores)
      .def_readonly("memory_mib", &rfaas::lease_part::memory_mib);

  py::class_<rfaas::lease>(m, "Lease",
                           "Cores and memory granted by a resource manager until an expiry; "
                           "pass it to Executor.allocate().")
      .def_readonly("id", &rfaas::lease::id)
      .def_readonly("expiry_ms", &rfaas::lease::expiry_ms, "milliseconds since the Unix epoch")
      .def_readonly("client", &rfaas::lease::client)
      .def_property_readonly(
          "owner_uid",
          [](const rfaas::lease &l) -> py::object {
            if (l.owner_uid == rfaas::lease::anonymous_uid)
              return py::none();
            return py::int_(l.owner_uid);
          },
          "the uid the resource manager authenticated (MUNGE), None when anonymous")
      .def_readonly("parts", &rfaas::lease::parts)
      .def_property_readonly("cores", &rfaas::lease::cores)
      .def("__repr__", [](const rfaas::lease &l) {
        return "<rfaas.Lease id=" + std::to_string(l.id) + " cores=" + std::to_string(l.cores()) +
               " parts=" + std::to_string(l.parts.size()) + ">";
      });

  py::class_<resource_manager>(m, "ResourceManager",
                               "A connection to an rFaaS resource manager, which grants leases.")
      .def(py::init([](const std::string &address, const std::string &device,
                       std::optional<std::string> devices, const std::string &client,
                       double connect_timeout, double timeout) {
             rfaas::device dev = find_device(device, devices);
             rfaas::timeouts t = make_timeouts(connect_timeout, timeout, timeout);
             py::gil_scoped_release unlocked;
             return new resource_manager{rfaas::resource_manager(dev, address, client, t), {}};
           }),
           py::arg("address"), py::arg("device") = "lo-tcp", py::arg("devices") = py::none(),
           py::arg("client") = "", py::kw_only(), py::arg("connect_timeout") = 5.0,
           py::arg("timeout") = 10.0,
           "Connect over `device` (a name in the device database `devices`, default "
           "$RFAAS_DEVICES or the installed one) to the resource manager at \"host:port\". "
           "Raises rfaas.Error (phase connect) when it cannot be reached.")
      .def(
          "lease",
          [](resource_manager &self, uint32_t cores, uint64_t memory_mib, double duration,
             uint32_t max_nodes) {
            auto d = millis(duration);
            py::gil_scoped_release unlocked;
            std::lock_guard<std::mutex> lock(self.mutex);
            return self.rm.lease(cores, memory_mib, d, max_nodes);
          },
          py::arg("cores"), py::arg("memory_mib") = 0, py::arg("duration") = 0.0,
          py::arg("max_nodes") = 1,
          "Lease `cores` cores and `memory_mib` MiB for `duration` seconds (0: the resource "
          "manager's default) on at most `max_nodes` nodes.")
      .def(
          "renew",
          [](resource_manager &self, rfaas::lease &l, double duration) {
            auto d = millis(duration);
            py::gil_scoped_release unlocked;
            std::lock_guard<std::mutex> lock(self.mutex);
            self.rm.renew(l, d);
          },
          py::arg("lease"), py::arg("duration") = 0.0,
          "Extend the lease to now + `duration` seconds; its tokens change (allocate again "
          "with the renewed lease).")
      .def(
          "release",
          [](resource_manager &self, const rfaas::lease &l) {
            py::gil_scoped_release unlocked;
            std::lock_guard<std::mutex> lock(self.mutex);
            self.rm.release(l);
          },
          py::arg("lease"), "End the lease now; its nodes end its executors.")
      .def_property_readonly("address", [](resource_manager &self) { return self.rm.address(); });

  py::class_<future>(m, "Future",
                     "The pending result of Executor.submit(): result() waits for it (and "
                     "drives the network meanwhile); `await` works too.")
      .def("result", &future::result,
           "The output's byte count (the output's bytes when submit() had no output); "
           "raises rfaas.InvocationError when the invocation failed.")
      .def("done", &future::done, "True once result() collected the outcome.")
      .def("__await__", [](py::object self) {
        // The wait releases the GIL and blocks on the network, so it runs in
        // the event loop's thread pool and the loop stays free.
        py::object loop = py::module_::import("asyncio").attr("get_running_loop")();
        return loop.attr("run_in_executor")(py::none(), self.attr("result")).attr("__await__")();
      });

  py::class_<executor>(m, "Executor",
                       "Remote cores that run functions of a shipped library. One executor "
                       "serialises its calls (it may be used from several threads).")
      .def(py::init([](const std::string &device, std::optional<std::string> devices,
                       double connect_timeout, double allocation_timeout,
                       double invocation_timeout) {
             rfaas::device dev = find_device(device, devices);
             rfaas::timeouts t =
                 make_timeouts(connect_timeout, allocation_timeout, invocation_timeout);
             py::gil_scoped_release unlocked;
             return new executor(dev, t);
           }),
           py::arg("device") = "lo-tcp", py::arg("devices") = py::none(), py::kw_only(),
           py::arg("connect_timeout") = 5.0, py::arg("allocation_timeout") = 10.0,
           py::arg("invocation_timeout") = 30.0,
           "Open the network on `device`, a name in the device database `devices` (default "
           "$RFAAS_DEVICES, else the one installed with rFaaS, else the source tree's for a "
           "module in a build tree). Timeouts in seconds.")
      .def("allocate", &allocate, py::arg("manager"), py::arg("library"), py::kw_only(),
           py::arg("cores") = py::none(), py::arg("memory_mib") = 0,
           py::arg("hot_timeout_ms") = 100, py::arg("max_input_size") = 64 * 1024,
           py::arg("max_output_size") = 64 * 1024, py::arg("slots") = 1, py::arg("part") = 0,
           "Allocate workers on `manager` (\"host:port\" of an executor manager, or a Lease: "
           "then on its part `part`, by default with all of the part's cores) and ship the "
           "function library `library`. cores defaults to 1 without a lease.")
      .def("close", &executor::close,
           "Deallocate (idempotent; also done when the executor is garbage-collected).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](executor &self, py::object, py::object, py::object) {
             self.close();
             return false;
           })
      .def("execute", &executor::execute, py::arg("function"), py::arg("input"),
           py::arg("output") = py::none(), py::kw_only(), py::arg("timeout") = py::none(),
           "Run `function` on `input` and wait. With `output` (a writable buffer) the result "
           "is written into it and its byte count returned; without, the result is returned "
           "as bytes. Raises rfaas.InvocationError when the invocation fails.")
      .def("submit", &executor::submit, py::arg("function"), py::arg("input"),
           py::arg("output") = py::none(),
           "Start `function` on `input` and return a Future at once. `input` and `output` "
           "are held until the result is collected.")
      .def("execute_parallel", &executor::execute_parallel, py::arg("function"), py::arg("inputs"),
           py::arg("outputs") = py::none(),
           "Run `function` once per input, spread over every worker and slot; returns one "
           "byte count (or bytes, without outputs) per input, in order.")
      .def("empty", &executor::registered_array, py::arg("shape"), py::arg("dtype") = "uint8",
           py::arg("zero") = false,
           "A numpy.ndarray in memory registered with this executor: as an input it is "
           "written without a copy, as an output the worker writes straight into it.")
      .def(
          "zeros",
          [](executor &self, py::object shape, py::object dtype) {
            return self.registered_array(shape, dtype, true);
          },
          py::arg("shape"), py::arg("dtype") = "uint8", "Like empty(), filled with zeros.")
      .def_property_readonly("allocated", [](executor &self) { return self.get().allocated(); })
      .def_property_readonly("workers", [](executor &self) { return self.get().workers(); })
      .def_property_readonly("slots", [](executor &self) { return self.get().slots(); })
      .def_property_readonly("allocation_id",
                             [](executor &self) { return self.get().allocation_id(); })
      .def_property_readonly("max_input_size",
                             [](executor &self) { return self.get().max_input_size(); })
      .def_property_readonly("max_output_size",
                             [](executor &self) { return self.get().max_output_size(); })
      .def_property_readonly(
          "network",
          [](executor &self) {
            return locked(self, [](rfaas::executor &ex) { return ex.describe_network(); });
          },
          "\"provider=tcp endpoint=connected ...\": the network in use")
      .def_property_readonly("copies", &copies,
                             "How the data of invocations travelled: inputs_in_place, "
                             "inputs_copied, results_in_place, results_copied, ...")
      .def_property_readonly("cold_start", &cold_start,
                             "Seconds from the start of the last allocate() to each phase.");
}
