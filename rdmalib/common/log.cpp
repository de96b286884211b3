// Shared named loggers (see rdmalib/log.hpp). The shared sink and level are
// kept in the loggers registered with spdlog, not in variables of this file:
// librfaas.so and the program that loads it may each hold a copy of rdmalib,
// and both must agree.
#include <rdmalib/logger.hpp>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace rdmalib::log {
namespace {

constexpr const char *kNames[] = {"rdmalib", "rfaas", "manager", "executor", "resource_manager"};
constexpr const char *kLevelNames[] = {"trace", "debug",    "info", "warn",
                                       "error", "critical", "off"};
constexpr const char *kPattern = "[%H:%M:%S.%e] [%n %P] [%l] %v";

std::mutex &registry_mutex() {
  static std::mutex m;
  return m;
}

spdlog::level::level_enum to_spdlog(Level l) {
  return static_cast<spdlog::level::level_enum>(static_cast<int>(l));
}

Level from_spdlog(spdlog::level::level_enum l) { return static_cast<Level>(static_cast<int>(l)); }

/// Creates every rFaaS logger that is missing, sharing the sink and level of
/// those that exist. Caller holds registry_mutex().
void ensure_all_locked() {
  std::shared_ptr<spdlog::sinks::dist_sink_mt> sink;
  std::optional<Level> lvl;
  for (const char *n : kNames)
    if (auto l = spdlog::get(n); l && !l->sinks().empty()) {
      sink = std::dynamic_pointer_cast<spdlog::sinks::dist_sink_mt>(l->sinks().front());
      lvl = from_spdlog(l->level());
      if (sink)
        break;
    }
  if (!sink) {
    sink = std::make_shared<spdlog::sinks::dist_sink_mt>();
    sink->add_sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    sink->set_pattern(kPattern);
  }
  if (!lvl) {
    lvl = Level::warn;
    if (const char *env = std::getenv(kEnvVar); env && *env) {
      if (auto parsed = parse_level(env))
        lvl = *parsed;
      else
        std::fprintf(stderr, "rfaas: %s=\"%s\" is not a level (valid: %s); using warn\n", kEnvVar,
                     env, valid_levels());
    }
  }
  for (const char *n : kNames) {
    if (spdlog::get(n))
      continue;
    auto logger = std::make_shared<spdlog::logger>(n, sink);
    logger->set_level(to_spdlog(*lvl));
    // The sink filters nothing; the logger's level does.
    logger->flush_on(spdlog::level::warn);
    spdlog::register_logger(logger);
  }
}

/// Hands each message to an application's callback.
class CallbackSink final : public spdlog::sinks::base_sink<std::mutex> {
public:
  explicit CallbackSink(Sink s) : sink_(std::move(s)) {}

protected:
  void sink_it_(const spdlog::details::log_msg &msg) override {
    sink_(from_spdlog(msg.level), std::string_view(msg.logger_name.data(), msg.logger_name.size()),
          std::string_view(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

private:
  Sink sink_;
};

} // namespace

const char *valid_levels() noexcept { return "trace, debug, info, warn, error, critical, off"; }

std::optional<Level> parse_level(std::string_view name) noexcept {
  for (int i = 0; i < 7; ++i)
    if (name == kLevelNames[i])
      return static_cast<Level>(i);
  if (name == "warning")
    return Level::warn;
  return std::nullopt;
}

const char *to_string(Level level) noexcept {
  int i = static_cast<int>(level);
  return i >= 0 && i < 7 ? kLevelNames[i] : "?";
}

std::shared_ptr<spdlog::logger> get(const char *name) {
  if (auto l = spdlog::get(name))
    return l;
  std::lock_guard<std::mutex> lock(registry_mutex());
  ensure_all_locked();
  if (auto l = spdlog::get(name))
    return l;
  throw std::invalid_argument(std::string("rdmalib::log: no logger called \"") + name + "\"");
}

void set_level(Level level) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  ensure_all_locked();
  for (const char *n : kNames)
    spdlog::get(n)->set_level(to_spdlog(level));
}

Level level() { return from_spdlog(get("rdmalib")->level()); }

void set_sink(Sink sink) {
  auto dist =
      std::dynamic_pointer_cast<spdlog::sinks::dist_sink_mt>(get("rdmalib")->sinks().front());
  if (!dist)
    return;
  std::shared_ptr<spdlog::sinks::sink> child;
  if (sink)
    child = std::make_shared<CallbackSink>(std::move(sink));
  else {
    child = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    child->set_pattern(kPattern);
  }
  dist->set_sinks({child});
}

} // namespace rdmalib::log
