#include "cli.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <rdmalib/config.hpp>
#include <rdmalib/fabric.hpp>

namespace rfaas::cli {

void add_standard_options(Options &options, bool log_level) {
  options.add_options("Common")("h,help", "print this help and exit")(
      "version", "print the rFaaS version, the network backend and its library version");
  if (log_level)
    options.add_options("Common")(
        "log-level",
        std::string("log level: ") + rdmalib::log::valid_levels() +
            " (default: $RFAAS_LOG_LEVEL, then the configuration, then warn)",
        value<std::string>());
}

std::string version_text(std::string_view program) {
  std::string backend_version;
  try {
    backend_version = rdmalib::Fabric::backend_version();
  } catch (const std::exception &e) {
    backend_version = std::string("(unknown: ") + e.what() + ")";
  }
  return std::string(program) + " (rFaaS " RDMALIB_VERSION "), network backend " +
         rdmalib::Fabric::backend_name() + " " + backend_version;
}

rdmalib::log::Level apply_log_level(const ParseResult &args, std::string_view fallback) {
  std::string origin, value;
  if (args.count("log-level")) {
    origin = "--log-level";
    value = args["log-level"].as<std::string>();
  } else if (const char *env = std::getenv(rdmalib::log::kEnvVar); env && *env) {
    origin = rdmalib::log::kEnvVar;
    value = env;
  } else {
    origin = "the configured log level";
    value = std::string(fallback);
  }
  auto level = rdmalib::log::parse_level(value);
  if (!level)
    throw UsageError(origin + ": unknown level \"" + value +
                     "\"; valid levels: " + rdmalib::log::valid_levels());
  rdmalib::log::set_level(*level);
  ::setenv(rdmalib::log::kEnvVar, rdmalib::log::to_string(*level), 1);
  return *level;
}

int run(std::string_view program, Options &options, int argc, char **argv,
        const std::function<int(const ParseResult &)> &body) {
  std::string prog(program);
  try {
    ParseResult args = options.parse(argc, argv);
    if (args.count("help")) {
      std::fputs(options.help().c_str(), stdout);
      return kSuccess;
    }
    if (args.count("version")) {
      std::printf("%s\n", version_text(program).c_str());
      return kSuccess;
    }
    if (args.count("log-level") && !rdmalib::log::parse_level(args["log-level"].as<std::string>()))
      apply_log_level(args); // throws the usage error
    return body(args);
  } catch (const OptionError &e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", prog.c_str(), e.what());
    return kUsage;
  } catch (const UsageError &e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", prog.c_str(), e.what());
    return kUsage;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: %s\n", prog.c_str(), e.what());
    return kFailure;
  }
}

} // namespace rfaas::cli
