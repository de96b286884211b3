// executor: started by the executor manager, never by hand.
//
//   executor --zygote --device <hex JSON device database> [--exec-each]
//       pre-initialised parent that forks one executor per allocation
//   executor --spec-fd N
//       run one allocation described by the LaunchSpec text on fd N
#include <cstdio>
#include <limits.h>
#include <unistd.h>

#include <cxxopts.hpp>
#include <rdmalib/rdmalib.hpp>
#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/launch_spec.hpp"
#include "executor/zygote.hpp"

int main(int argc, char **argv) {
  // Logs go to stderr: stdout is the zygote's event pipe.
  spdlog::set_default_logger(spdlog::stderr_color_mt("executor"));
  spdlog::set_pattern("[%H:%M:%S.%e] [zygote %P] [%l] %v");
  spdlog::cfg::load_env_levels();
  cxxopts::Options options("executor",
                           "rFaaS executor: started by executor_manager, never by hand.");
  options.add_options()("zygote", "run as the manager's pre-initialised parent")(
      "device", "device database JSON (hex) of the device to warm up",
      cxxopts::value<std::string>())("exec-each", "zygote: exec a fresh executor per allocation")(
      "spec-fd", "run one allocation from the launch spec on this fd",
      cxxopts::value<int>())("h,help", "print this help");
  try {
    auto args = options.parse(argc, argv);
    if (args.count("help")) {
      std::puts(options.help().c_str());
      return 0;
    }
    if (args.count("spec-fd")) {
      spdlog::set_pattern("[%H:%M:%S.%e] [executor %P] [%l] %v");
      return rfaas::executor::run_from_spec_fd(args["spec-fd"].as<int>());
    }
    if (args.count("zygote")) {
      rdmalib::DeviceConfig dev;
      if (args.count("device")) {
        auto bytes = rfaas::server::from_hex(args["device"].as<std::string>());
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
      return rfaas::executor::run_zygote(dev, args.count("exec-each") > 0, self);
    }
    std::fprintf(stderr, "executor: started by executor_manager only (see --help)\n");
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "executor: %s\n", e.what());
    return 2;
  }
}
