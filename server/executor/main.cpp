// executor: started by the executor manager, never by hand.
//
//   executor --zygote --device <hex JSON device database> [--exec-each] [--pool N]
//            [--manager-host H --manager-port P --connect-ms MS]
//       pre-initialised parent that forks one executor per allocation, and
//       keeps N executors pre-started
//   executor --spec-fd N
//       run one allocation described by the LaunchSpec text on fd N
//   executor --spare-fd 3 --lifeline-fd 4 --device <hex> [--isolate-tenants]
//       in a container (server/executor/container_pool.hpp): open the fabric,
//       wait for a LaunchSpec on fd 3, serve it; exit when fd 4 closes
#include <cstdio>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "options.hpp"
#include <rdmalib/logger.hpp>
#include <rdmalib/rdmalib.hpp>
#include <spdlog/spdlog.h>

#include "cli.hpp"
#include "common/launch_spec.hpp"
#include "common/sandbox_config.hpp"
#include "executor/zygote.hpp"

int main(int argc, char **argv) {
  // Logs go to stderr: stdout is the zygote's event pipe. The level comes from
  // --log-level or RFAAS_LOG_LEVEL, which the executor manager exports.
  spdlog::set_default_logger(rdmalib::log::get("executor"));
  spdlog::set_pattern("[%H:%M:%S.%e] [zygote %P] [%l] %v");
  rfaas::cli::Options options("executor",
                              "rFaaS executor: started by executor_manager, never by hand.");
  options.add_options()("zygote", "run as the manager's pre-initialised parent")(
      "device", "device database JSON (hex) of the device to warm up",
      rfaas::cli::value<std::string>())("exec-each",
                                        "zygote: exec a fresh executor per allocation")(
      "spec-fd", "run one allocation from the launch spec on this fd", rfaas::cli::value<int>())(
      "sandbox", "zygote: how to confine executors (hex text, from the manager)",
      rfaas::cli::value<std::string>())("pool", "zygote: executors kept pre-started",
                                        rfaas::cli::value<uint32_t>()->default_value("0"))(
      "manager-host", "zygote: where pooled executors connect their accounting links",
      rfaas::cli::value<std::string>())("manager-port", "zygote: the manager's port",
                                        rfaas::cli::value<uint32_t>())(
      "connect-ms", "zygote: pooled executors' deadline to connect to the manager",
      rfaas::cli::value<uint32_t>()->default_value("5000"))(
      "start-ms", "zygote: a pooled executor's deadline to report ready (0: none)",
      rfaas::cli::value<uint32_t>()->default_value("0"))(
      "spare-fd", "in a container: wait for a launch spec on this socket",
      rfaas::cli::value<int>())("lifeline-fd", "exit when the zygote closes this socket",
                                rfaas::cli::value<int>())(
      "isolate-tenants", "serve peers that must not be trusted (rdmalib::Fabric::isolate_tenants)");
  rfaas::cli::add_standard_options(options);
  return rfaas::cli::run("executor", options, argc, argv, [&](const rfaas::cli::ParseResult &args) {
    rfaas::cli::apply_log_level(args);
    if (args.count("isolate-tenants"))
      rdmalib::Fabric::isolate_tenants();
    auto device_arg = [&args]() {
      rdmalib::DeviceConfig dev;
      if (args.count("device")) {
        auto bytes = rfaas::server::bytes_from_hex(args["device"].as<std::string>());
        auto db =
            rdmalib::DeviceDatabase::parse(std::string(bytes.begin(), bytes.end()), "--device");
        if (!db.devices().empty())
          dev = db.devices()[0];
      }
      return dev;
    };
    if (args.count("lifeline-fd")) {
      // The executor's parent is a container's monitor, not the zygote:
      // this socket's closing (the zygote never writes to it) stands for the zygote's death signal
      // (and for SIGKILL, which no container engine passes on). The thread takes no signal, so
      // SIGTERM still reaches the executor's own handling.
      const int fd = args["lifeline-fd"].as<int>();
      sigset_t all, old;
      sigfillset(&all);
      pthread_sigmask(SIG_SETMASK, &all, &old);
      std::thread([fd] {
        pollfd p{fd, POLLIN, 0};
        while (::poll(&p, 1, -1) >= 0 || errno == EINTR)
          if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
            break;
        _exit(rfaas::server::ExitTerminated);
      }).detach();
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
    }
    if (args.count("spare-fd")) {
      // Nobody of the same uid may ptrace it or open its /proc/PID/mem (on
      // shm every executor shares the manager's uid and the host's PIDs).
      prctl(PR_SET_DUMPABLE, 0);
      spdlog::set_pattern("[%H:%M:%S.%e] [executor %P] [%l] %v");
      const int code =
          rfaas::executor_process::run_waiting_executor(args["spare-fd"].as<int>(), device_arg());
      // Its own exit, for the zygote, ahead of the container's teardown.
      if (args.count("lifeline-fd")) {
        const int32_t c = code;
        ssize_t n = ::send(args["lifeline-fd"].as<int>(), &c, sizeof c, MSG_NOSIGNAL);
        (void)n;
      }
      return code;
    }
    if (args.count("spec-fd")) {
      spdlog::set_pattern("[%H:%M:%S.%e] [executor %P] [%l] %v");
      return rfaas::executor_process::run_from_spec_fd(args["spec-fd"].as<int>());
    }
    if (args.count("zygote")) {
      rdmalib::DeviceConfig dev = device_arg();
      char self[PATH_MAX];
      ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
      if (n <= 0) {
        spdlog::error("zygote: cannot read /proc/self/exe");
        return 1;
      }
      self[n] = '\0';
      spdlog::debug("zygote: started, log level {}",
                    rdmalib::log::to_string(rdmalib::log::level()));
      rfaas::server::SandboxConfig sandbox;
      if (args.count("sandbox")) {
        auto bytes = rfaas::server::bytes_from_hex(args["sandbox"].as<std::string>());
        sandbox = rfaas::server::SandboxConfig::parse(std::string(bytes.begin(), bytes.end()));
      } else {
        sandbox.kind = rfaas::server::SandboxKind::Process;
      }
      rfaas::executor_process::ManagerAddress manager;
      if (args.count("manager-host") && args.count("manager-port")) {
        manager.host = args["manager-host"].as<std::string>();
        manager.port = static_cast<uint16_t>(args["manager-port"].as<uint32_t>());
        manager.connect_ms = args["connect-ms"].as<uint32_t>();
      }
      return rfaas::executor_process::run_zygote(dev, args.count("exec-each") > 0, self, sandbox,
                                                 args["pool"].as<uint32_t>(), manager,
                                                 args["start-ms"].as<uint32_t>());
    }
    throw rfaas::cli::UsageError("started by executor_manager only (--zygote or --spec-fd)");
  });
}
