#include "resource_manager/config.hpp"

#include <fstream>
#include <initializer_list>
#include <sstream>

#include <nlohmann/json.hpp>

namespace rfaas::rm {

namespace {

using nlohmann::json;

struct Reader {
  std::string origin;

  [[noreturn]] void fail(const std::string &key, const std::string &why) const {
    throw ConfigError(origin + ": " + key + ": " + why);
  }

  void only(const json &obj, const std::string &where,
            std::initializer_list<const char *> keys) const {
    if (!obj.is_object())
      fail(where.empty() ? "(top level)" : where, "expected an object");
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      bool known = false;
      std::string valid;
      for (const char *k : keys) {
        known |= it.key() == k;
        valid += valid.empty() ? k : std::string(", ") + k;
      }
      if (!known)
        fail(where.empty() ? it.key() : where + "." + it.key(),
             "unknown key (valid keys here: " + valid + ")");
    }
  }

  std::string text(const json &v, const std::string &key) const {
    if (!v.is_string())
      fail(key, "expected a string");
    return v.get<std::string>();
  }

  uint64_t number(const json &v, const std::string &key, uint64_t lo, uint64_t hi) const {
    if (!v.is_number_integer())
      fail(key, "expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
    if (v.is_number_unsigned()) {
      uint64_t n = v.get<uint64_t>();
      if (n < lo || n > hi)
        fail(key, "expected " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
                      std::to_string(n));
      return n;
    }
    int64_t n = v.get<int64_t>();
    if (n < 0 || static_cast<uint64_t>(n) < lo || static_cast<uint64_t>(n) > hi)
      fail(key, "expected " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
                    std::to_string(n));
    return static_cast<uint64_t>(n);
  }
};

std::string resolve(const std::string &path, const std::string &base_dir) {
  if (path.empty() || path[0] == '/' || base_dir.empty())
    return path;
  return base_dir + "/" + path;
}

} // namespace

ResourceManagerConfig ResourceManagerConfig::load(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    throw ConfigError(path + ": cannot open (see config/resource_manager.json for an example)");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  return parse(ss.str(), path, dir);
}

ResourceManagerConfig ResourceManagerConfig::parse(const std::string &text,
                                                   const std::string &origin,
                                                   const std::string &base_dir) {
  Reader r{origin};
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception &e) {
    // parse_error, and out_of_range for a number too large for a double
    // (1e400: what fuzzing found escaping the other readers).
    throw ConfigError(origin + ": not valid JSON: " + e.what());
  }
  ResourceManagerConfig c;
  r.only(doc, "", {"database", "http", "fabric", "placement", "leases", "nodes", "tick_ms", "log"});
  if (doc.contains("database")) {
    c.database = r.text(doc["database"], "database");
    if (c.database.empty())
      r.fail("database", "must name a file");
  }
  c.database = resolve(c.database, base_dir);

  std::string token, token_file;
  if (doc.contains("http")) {
    const json &h = doc["http"];
    r.only(h, "http", {"host", "port", "threads", "token", "token_file"});
    if (h.contains("host"))
      c.http_host = r.text(h["host"], "http.host");
    if (h.contains("port"))
      c.http_port = static_cast<uint16_t>(r.number(h["port"], "http.port", 0, 65535));
    if (h.contains("threads"))
      c.http_threads = static_cast<uint32_t>(r.number(h["threads"], "http.threads", 1, 64));
    if (h.contains("token"))
      token = r.text(h["token"], "http.token");
    if (h.contains("token_file"))
      token_file = resolve(r.text(h["token_file"], "http.token_file"), base_dir);
  }
  if (!token.empty() && !token_file.empty())
    r.fail("http", "give either token or token_file, not both");
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in)
      r.fail("http.token_file", "cannot read " + token_file);
    std::getline(in, token);
    while (!token.empty() && (token.back() == '\r' || token.back() == ' '))
      token.pop_back();
  }
  if (token.size() < 16)
    r.fail(token_file.empty() ? "http.token" : "http.token_file",
           "an administrator token of at least 16 characters is required for changes through "
           "the REST API (e.g. `openssl rand -hex 32`)");
  c.admin_token = token;

  if (doc.contains("placement")) {
    std::string p = r.text(doc["placement"], "placement");
    if (!parse_placement_policy(p, c.registry.policy))
      r.fail("placement", "expected \"spread\" or \"pack\", got \"" + p + "\"");
  }
  if (doc.contains("leases")) {
    const json &l = doc["leases"];
    r.only(l, "leases", {"default_duration_ms", "max_duration_ms", "max_nodes"});
    if (l.contains("default_duration_ms"))
      c.registry.default_lease_ms =
          r.number(l["default_duration_ms"], "leases.default_duration_ms", 1000, 30ull * 86400000);
    if (l.contains("max_duration_ms"))
      c.registry.max_lease_ms =
          r.number(l["max_duration_ms"], "leases.max_duration_ms", 1000, 30ull * 86400000);
    if (l.contains("max_nodes"))
      c.registry.max_nodes_per_lease =
          static_cast<uint32_t>(r.number(l["max_nodes"], "leases.max_nodes", 1, 1024));
  }
  if (c.registry.default_lease_ms > c.registry.max_lease_ms)
    r.fail("leases.default_duration_ms", "must not exceed leases.max_duration_ms");
  if (doc.contains("nodes")) {
    const json &n = doc["nodes"];
    r.only(n, "nodes", {"heartbeat_timeout_ms"});
    if (n.contains("heartbeat_timeout_ms"))
      c.registry.heartbeat_timeout_ms =
          r.number(n["heartbeat_timeout_ms"], "nodes.heartbeat_timeout_ms", 100, 3600000);
  }
  if (doc.contains("fabric")) {
    const json &f = doc["fabric"];
    r.only(f, "fabric",
           {"device_database", "device", "host", "port", "accept_timeout_ms", "heartbeat_ms",
            "registration_window_ms", "idle_timeout_ms", "max_connections"});
    FabricConfig &fc = c.fabric;
    fc.enabled = true;
    if (!f.contains("device_database"))
      r.fail("fabric.device_database", "required: the device database (e.g. \"devices.json\")");
    if (!f.contains("device"))
      r.fail("fabric.device", "required: the device entry to listen on (e.g. \"lo-tcp\")");
    fc.device_database = resolve(r.text(f["device_database"], "fabric.device_database"), base_dir);
    fc.device = r.text(f["device"], "fabric.device");
    if (f.contains("host"))
      fc.host = r.text(f["host"], "fabric.host");
    if (f.contains("port"))
      fc.port = static_cast<uint16_t>(r.number(f["port"], "fabric.port", 0, 65535));
    if (f.contains("accept_timeout_ms"))
      fc.accept_timeout_ms =
          r.number(f["accept_timeout_ms"], "fabric.accept_timeout_ms", 10, 10'000);
    if (f.contains("heartbeat_ms"))
      fc.heartbeat_ms =
          static_cast<uint32_t>(r.number(f["heartbeat_ms"], "fabric.heartbeat_ms", 10, 600'000));
    if (f.contains("registration_window_ms"))
      fc.registration_window_ms =
          r.number(f["registration_window_ms"], "fabric.registration_window_ms", 1000, 86'400'000);
    if (f.contains("idle_timeout_ms"))
      fc.idle_timeout_ms = r.number(f["idle_timeout_ms"], "fabric.idle_timeout_ms", 100, 600'000);
    if (f.contains("max_connections"))
      fc.max_connections = static_cast<uint32_t>(
          r.number(f["max_connections"], "fabric.max_connections", 1, 100'000));
  }
  if (c.fabric.enabled && c.fabric.heartbeat_ms >= c.registry.heartbeat_timeout_ms)
    r.fail("fabric.heartbeat_ms", "must be shorter than nodes.heartbeat_timeout_ms (" +
                                      std::to_string(c.registry.heartbeat_timeout_ms) + ")");
  if (doc.contains("tick_ms"))
    c.tick_ms = r.number(doc["tick_ms"], "tick_ms", 10, 60000);
  if (doc.contains("log")) {
    const json &l = doc["log"];
    r.only(l, "log", {"level"});
    if (l.contains("level")) {
      c.log_level = r.text(l["level"], "log.level");
      static const char *levels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
      bool ok = false;
      for (const char *lv : levels)
        ok |= c.log_level == lv;
      if (!ok)
        r.fail("log.level", "expected trace, debug, info, warn, error, critical or off, got \"" +
                                c.log_level + "\"");
    }
  }
  return c;
}

} // namespace rfaas::rm
