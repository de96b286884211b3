// rfaas/log.hpp over rdmalib's shared loggers.
#include <rfaas/log.hpp>

#include <stdexcept>
#include <string>

#include <rdmalib/log.hpp>

namespace rfaas {

void set_log_level(LogLevel level) {
  rdmalib::log::set_level(static_cast<rdmalib::log::Level>(static_cast<int>(level)));
}

void set_log_level(std::string_view level) {
  auto parsed = rdmalib::log::parse_level(level);
  if (!parsed)
    throw std::invalid_argument("rfaas::set_log_level: unknown level \"" + std::string(level) +
                                "\" (valid: " + rdmalib::log::valid_levels() + ")");
  rdmalib::log::set_level(*parsed);
}

void set_log_sink(LogSink sink) {
  if (!sink) {
    rdmalib::log::set_sink({});
    return;
  }
  rdmalib::log::set_sink([s = std::move(sink)](rdmalib::log::Level l, std::string_view component,
                                               std::string_view text) {
    s(static_cast<LogLevel>(static_cast<int>(l)), component, text);
  });
}

} // namespace rfaas
