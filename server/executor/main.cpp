// executor: started by the executor manager, never by hand.
//
//   executor --zygote --device <hex JSON device database> [--exec-each] [--pool N]
//       pre-initialised parent that forks one executor per allocation, and
//       keeps N executors pre-started
//   executor --spec-fd N
//       run one allocation described by the LaunchSpec text on fd N
#include <cstdio>
#include <limits.h>
#include <unistd.h>

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
                                        rfaas::cli::value<uint32_t>()->default_value("0"));
  rfaas::cli::add_standard_options(options);
  return rfaas::cli::run("executor", options, argc, argv, [&](const rfaas::cli::ParseResult &args) {
    rfaas::cli::apply_log_level(args);
    if (args.count("spec-fd")) {
      spdlog::set_pattern("[%H:%M:%S.%e] [executor %P] [%l] %v");
      return rfaas::executor_process::run_from_spec_fd(args["spec-fd"].as<int>());
    }
    if (args.count("zygote")) {
      rdmalib::DeviceConfig dev;
      if (args.count("device")) {
        auto bytes = rfaas::server::bytes_from_hex(args["device"].as<std::string>());
        auto db =
            rdmalib::DeviceDatabase::parse(std::string(bytes.begin(), bytes.end()), "--device");
        if (!db.devices().empty())
          dev = db.devices()[0];
      }
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
      return rfaas::executor_process::run_zygote(dev, args.count("exec-each") > 0, self, sandbox,
                                                 args["pool"].as<uint32_t>());
    }
    throw rfaas::cli::UsageError("started by executor_manager only (--zygote or --spec-fd)");
  });
}
