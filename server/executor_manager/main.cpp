// executor_manager: leases this node's cores to rFaaS clients.
//
//   executor_manager --config config/executor_manager.json --skip-resource-manager
//
// Prints "executor_manager: listening on <provider> <host>:<port>" on stdout
// once it accepts clients (tests wait for that line), logs to stderr, and
// runs until SIGINT or SIGTERM.
#include <limits.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>

#include "options.hpp"
#include <rdmalib/logger.hpp>
#include <rdmalib/rdmalib.hpp>
#include <spdlog/spdlog.h>

#include "cli.hpp"
#include "executor_manager/config.hpp"
#include "executor_manager/manager.hpp"

namespace {

/// The executor binary is found relative to ours, never through PATH: in an
/// installation it is in libexec/rfaas/ (RFAAS_BIN_TO_LIBEXEC is the relative
/// path from the installed bin/ to it, so a moved prefix still works).
std::string executor_path() {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    throw rfaas::manager::ConfigError("cannot read /proc/self/exe to find the executor binary");
  self[n] = '\0';
  std::string dir(self);
  dir = dir.substr(0, dir.rfind('/'));
  // In order: the installed layout, the build tree (sibling directories), and
  // both binaries copied by hand into one directory.
  const std::string candidates[] = {dir + "/" RFAAS_BIN_TO_LIBEXEC "/executor",
                                    dir + "/../executor/executor", dir + "/executor"};
  for (const std::string &candidate : candidates)
    if (access(candidate.c_str(), X_OK) == 0)
      return candidate;
  throw rfaas::manager::ConfigError("no executor binary for " + std::string(self) +
                                    " (looked for " + candidates[0] + ", " + candidates[1] +
                                    " and " + candidates[2] +
                                    "); reinstall rFaaS or rebuild the executor target");
}

} // namespace

int main(int argc, char **argv) {
  // Every spdlog call of the manager goes to the "manager" logger (stderr).
  spdlog::set_default_logger(rdmalib::log::get("manager"));
  rfaas::cli::Options options("executor_manager",
                              "rFaaS executor manager: leases this node's cores to clients.");
  options.add_options()("c,config", "configuration file (JSON, see config/README.md)",
                        rfaas::cli::value<std::string>())(
      "device", "device entry to use (overrides the config's \"device\")",
      rfaas::cli::value<std::string>())("devices",
                                        "device database (overrides \"device_database\")",
                                        rfaas::cli::value<std::string>())(
      "provider", "provider for the device (overrides the device entry)",
      rfaas::cli::value<std::string>())("host", "address to listen on (overrides listen.host)",
                                        rfaas::cli::value<std::string>())(
      "port", "port to listen on, 0 = any (overrides listen.port)", rfaas::cli::value<int>())(
      "cores", "CPU list for workers, e.g. 1-3 (overrides resources.cores)",
      rfaas::cli::value<std::string>())("skip-resource-manager",
                                        "standalone: accept clients without a resource manager");
  rfaas::cli::add_standard_options(options);
  return rfaas::cli::run(
      "executor_manager", options, argc, argv, [&](const rfaas::cli::ParseResult &args) {
        if (!args.count("config"))
          throw rfaas::cli::UsageError(
              "--config FILE is required (example: config/executor_manager.json)");
        if (args.count("port")) {
          int port = args["port"].as<int>();
          if (port < 0 || port > 65535)
            throw rfaas::cli::UsageError("--port: expected 0..65535, got " + std::to_string(port));
        }
        using rfaas::manager::ConfigError;
        // A bad --log-level is a usage error even if the configuration is broken.
        if (args.count("log-level") &&
            !rdmalib::log::parse_level(args["log-level"].as<std::string>()))
          rfaas::cli::apply_log_level(args);
        auto cfg = rfaas::manager::ManagerConfig::load(args["config"].as<std::string>());
        if (args.count("devices"))
          cfg.device_database = args["devices"].as<std::string>();
        if (args.count("device"))
          cfg.device = args["device"].as<std::string>();
        if (args.count("host"))
          cfg.listen_host = args["host"].as<std::string>();
        if (args.count("port"))
          cfg.listen_port = static_cast<uint16_t>(args["port"].as<int>());
        if (args.count("cores"))
          cfg.cores = rfaas::manager::parse_core_list(args["cores"].as<std::string>(), "--cores");
        // --log-level, then RFAAS_LOG_LEVEL, then log.level; exported to the
        // zygote and the executors through RFAAS_LOG_LEVEL.
        rfaas::cli::apply_log_level(args, cfg.log_level);

        // --skip-resource-manager: standalone whatever the configuration says.
        if (args.count("skip-resource-manager"))
          cfg.resource_manager_enabled = false;
        // Every configured core must be usable by this process (cgroups, taskset).
        cpu_set_t allowed;
        if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
          for (int core : cfg.cores)
            if (core >= CPU_SETSIZE || !CPU_ISSET(core, &allowed))
              throw ConfigError(args["config"].as<std::string>() + ": resources.cores: CPU " +
                                std::to_string(core) +
                                " is not available to this process (see taskset -p / nproc)");

        auto db = rdmalib::DeviceDatabase::load(cfg.device_database);
        rdmalib::DeviceConfig device = db.find(cfg.device);
        if (args.count("provider"))
          device.provider = args["provider"].as<std::string>();

        // Executors and clients killed on this node (SIGKILL, OOM) leave shared
        // memory behind that nothing else frees; a manager start is the moment
        // an operator expects a clean slate.
        rdmalib::Fabric::ReclaimReport reclaimed = rdmalib::Fabric::reclaim_stale();
        if (!reclaimed.names.empty())
          spdlog::info("reclaimed {} stale shared-memory region(s), {} MiB, left by processes that "
                       "died without closing them",
                       reclaimed.names.size(), reclaimed.bytes >> 20);

        // Clients and executors are peers this process must not trust: no
        // provider may let them reach its memory past their keys.
        if (cfg.sandbox.kind != rfaas::server::SandboxKind::Process)
          rdmalib::Fabric::isolate_tenants();
        std::unique_ptr<rfaas::manager::Manager> owned;
        try {
          owned = std::make_unique<rfaas::manager::Manager>(cfg, device, executor_path());
        } catch (const rdmalib::Error &e) {
          if (e.backend_code() != EADDRINUSE && e.backend_code() != EBUSY)
            throw;
          throw std::runtime_error(
              std::string(e.what()) + "; port " + std::to_string(cfg.listen_port) +
              " is taken: pick another with --port N, or --port 0 for any free "
              "port (the chosen one is printed on stdout)");
        }
        rfaas::manager::Manager &manager = *owned;
        std::printf("executor_manager: listening on %s %s\n", manager.provider().c_str(),
                    manager.address().to_string().c_str());
        std::fflush(stdout);
        return manager.run();
      });
}
