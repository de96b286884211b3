#include "executor_manager/config.hpp"

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/protocol.hpp"

namespace rfaas::manager {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string &origin, const std::string &path,
                       const std::string &what) {
  throw ConfigError(origin + ": " + path + ": " + what);
}

std::string shown(const json &v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

/// Reject keys outside `allowed`, naming the first unknown one and the valid set.
void check_keys(const json &obj, const std::string &origin, const std::string &path,
                std::initializer_list<const char *> allowed) {
  if (!obj.is_object())
    fail(origin, path.empty() ? "(top level)" : path,
         std::string("expected an object, got ") + obj.type_name());
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known =
        std::any_of(allowed.begin(), allowed.end(), [&](const char *k) { return it.key() == k; });
    if (!known) {
      std::string list;
      for (const char *k : allowed)
        list += (list.empty() ? "" : ", ") + std::string(k);
      fail(origin, (path.empty() ? "" : path + ".") + it.key(),
           "unknown key (valid keys here: " + list + ")");
    }
  }
}

std::string get_string(const json &v, const std::string &origin, const std::string &path) {
  if (!v.is_string())
    fail(origin, path, std::string("expected a string, got ") + v.type_name() + " " + shown(v));
  return v.get<std::string>();
}

bool get_bool(const json &v, const std::string &origin, const std::string &path) {
  if (!v.is_boolean())
    fail(origin, path, std::string("expected true or false, got ") + shown(v));
  return v.get<bool>();
}

uint64_t get_uint(const json &v, const std::string &origin, const std::string &path, uint64_t min,
                  uint64_t max) {
  std::string expected = "expected an integer " + std::to_string(min) + ".." + std::to_string(max);
  if (!v.is_number_unsigned() && !v.is_number_integer())
    fail(origin, path, expected + ", got " + shown(v));
  if (v.is_number_integer() && !v.is_number_unsigned())
    fail(origin, path, expected + ", got " + shown(v));
  uint64_t value = v.get<uint64_t>();
  if (value < min || value > max)
    fail(origin, path, expected + ", got " + shown(v));
  return value;
}

std::string resolve(const std::string &base_dir, const std::string &p) {
  if (p.empty() || p[0] == '/' || base_dir.empty())
    return p;
  return base_dir + "/" + p;
}

int parse_cpu(const std::string &tok, const std::string &origin) {
  if (tok.empty() || tok.size() > 4 ||
      !std::all_of(tok.begin(), tok.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw ConfigError(origin + ": \"" + tok + "\" is not a CPU id (expected 0..4095)");
  int v = std::stoi(tok);
  if (v > 4095)
    throw ConfigError(origin + ": CPU id " + tok + " is out of range (expected 0..4095)");
  return v;
}

} // namespace

std::vector<int> parse_core_list(const std::string &text, const std::string &origin) {
  std::vector<int> cores;
  std::set<int> seen;
  auto add = [&](int c) {
    if (!seen.insert(c).second)
      throw ConfigError(origin + ": CPU " + std::to_string(c) + " is listed twice");
    cores.push_back(c);
  };
  std::stringstream ss(text);
  std::string item;
  bool any = false;
  while (std::getline(ss, item, ',')) {
    any = true;
    auto dash = item.find('-');
    if (dash == std::string::npos) {
      add(parse_cpu(item, origin));
      continue;
    }
    int lo = parse_cpu(item.substr(0, dash), origin);
    int hi = parse_cpu(item.substr(dash + 1), origin);
    if (lo > hi)
      throw ConfigError(origin + ": range \"" + item + "\" is reversed");
    for (int c = lo; c <= hi; ++c)
      add(c);
  }
  if (!any || text.back() == ',')
    throw ConfigError(origin + ": \"" + text + "\" is not a CPU list (e.g. \"1\", \"0-3,6\")");
  return cores;
}

ManagerConfig ManagerConfig::parse(const std::string &json_text, const std::string &origin,
                                   const std::string &base_dir) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception &e) {
    // parse_error, and out_of_range for a number too large for a double.
    throw ConfigError(origin + ": not valid JSON: " + e.what());
  }
  ManagerConfig c;
  check_keys(root, origin, "",
             {"device_database", "device", "listen", "resource_manager", "resources", "limits",
              "executor", "deadlines_ms", "log"});
  if (!root.contains("device_database"))
    fail(origin, "device_database", "missing (path of the device database, e.g. devices.json)");
  c.device_database =
      resolve(base_dir, get_string(root["device_database"], origin, "device_database"));
  if (!root.contains("device"))
    fail(origin, "device", "missing (name of the device entry to listen on)");
  c.device = get_string(root["device"], origin, "device");

  if (root.contains("listen")) {
    const json &l = root["listen"];
    check_keys(l, origin, "listen", {"host", "port"});
    if (l.contains("host"))
      c.listen_host = get_string(l["host"], origin, "listen.host");
    if (l.contains("port"))
      c.listen_port = static_cast<uint16_t>(get_uint(l["port"], origin, "listen.port", 0, 65535));
  }
  if (root.contains("resource_manager")) {
    const json &r = root["resource_manager"];
    check_keys(r, origin, "resource_manager", {"enabled", "address", "secret_file"});
    if (r.contains("enabled"))
      c.resource_manager_enabled = get_bool(r["enabled"], origin, "resource_manager.enabled");
    if (r.contains("address"))
      c.resource_manager_address = get_string(r["address"], origin, "resource_manager.address");
    if (r.contains("secret_file"))
      c.resource_manager_secret_file =
          resolve(base_dir, get_string(r["secret_file"], origin, "resource_manager.secret_file"));
  }
  if (!root.contains("resources"))
    fail(origin, "resources", "missing (at least resources.cores)");
  {
    const json &r = root["resources"];
    check_keys(r, origin, "resources", {"cores", "memory_mib", "max_allocations"});
    if (!r.contains("cores"))
      fail(origin, "resources.cores", "missing (CPU ids for workers, e.g. [1, 2] or \"1-2\")");
    const json &cores = r["cores"];
    if (cores.is_string()) {
      c.cores = parse_core_list(cores.get<std::string>(), origin + ": resources.cores");
    } else if (cores.is_array()) {
      std::set<int> seen;
      for (size_t i = 0; i < cores.size(); ++i) {
        std::string path = "resources.cores[" + std::to_string(i) + "]";
        int id = static_cast<int>(get_uint(cores[i], origin, path, 0, 4095));
        if (!seen.insert(id).second)
          fail(origin, path, "CPU " + std::to_string(id) + " is listed twice");
        c.cores.push_back(id);
      }
    } else {
      fail(origin, "resources.cores",
           "expected an array of CPU ids or a CPU list string, got " + shown(cores));
    }
    if (c.cores.empty())
      fail(origin, "resources.cores", "empty: the manager needs at least one core to lease");
    if (c.cores.size() > protocol::kMaxWorkers)
      fail(origin, "resources.cores", "more than 256 cores");
    if (r.contains("memory_mib"))
      c.memory_mib = static_cast<uint32_t>(
          get_uint(r["memory_mib"], origin, "resources.memory_mib", 16, 1u << 24));
    if (r.contains("max_allocations"))
      c.max_allocations = static_cast<uint32_t>(
          get_uint(r["max_allocations"], origin, "resources.max_allocations", 1, 4096));
  }
  if (root.contains("limits")) {
    const json &l = root["limits"];
    check_keys(l, origin, "limits",
               {"max_input_slots", "max_slot_size", "max_library_size", "default_memory_mib"});
    if (l.contains("max_input_slots"))
      c.max_input_slots = static_cast<uint32_t>(
          get_uint(l["max_input_slots"], origin, "limits.max_input_slots", 1, protocol::kMaxSlots));
    if (l.contains("max_slot_size"))
      c.max_slot_size = static_cast<uint32_t>(
          get_uint(l["max_slot_size"], origin, "limits.max_slot_size",
                   protocol::kInvocationHeaderSize + 1, protocol::kMaxSlotSize));
    if (l.contains("max_library_size"))
      c.max_library_size = get_uint(l["max_library_size"], origin, "limits.max_library_size", 1,
                                    protocol::kMaxLibrarySize);
    if (l.contains("default_memory_mib"))
      c.default_memory_mib = static_cast<uint32_t>(
          get_uint(l["default_memory_mib"], origin, "limits.default_memory_mib", 16, 1u << 24));
  }
  if (c.default_memory_mib > c.memory_mib)
    fail(origin, "limits.default_memory_mib",
         "larger than resources.memory_mib (" + std::to_string(c.memory_mib) + ")");
  if (root.contains("executor")) {
    const json &e = root["executor"];
    check_keys(e, origin, "executor", {"zygote"});
    if (e.contains("zygote"))
      c.zygote = get_bool(e["zygote"], origin, "executor.zygote");
  }
  if (root.contains("deadlines_ms")) {
    const json &d = root["deadlines_ms"];
    check_keys(
        d, origin, "deadlines_ms",
        {"connect", "executor_start", "workers_connected", "library_loaded", "shutdown_grace"});
    auto ms = [&](const char *key, uint32_t &out) {
      if (d.contains(key))
        out = static_cast<uint32_t>(
            get_uint(d[key], origin, std::string("deadlines_ms.") + key, 1, 3600000));
    };
    ms("connect", c.connect_ms);
    ms("executor_start", c.executor_start_ms);
    ms("workers_connected", c.workers_connected_ms);
    ms("library_loaded", c.library_loaded_ms);
    ms("shutdown_grace", c.shutdown_grace_ms);
  }
  if (root.contains("log")) {
    const json &l = root["log"];
    check_keys(l, origin, "log", {"level", "accounting"});
    if (l.contains("level")) {
      c.log_level = get_string(l["level"], origin, "log.level");
      static const char *levels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
      if (std::none_of(std::begin(levels), std::end(levels),
                       [&](const char *s) { return c.log_level == s; }))
        fail(origin, "log.level",
             "\"" + c.log_level +
                 "\" is not one of trace, debug, info, warn, error, critical, off");
    }
    if (l.contains("accounting"))
      c.log_accounting = get_bool(l["accounting"], origin, "log.accounting");
  }
  return c;
}

ManagerConfig ManagerConfig::load(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    throw ConfigError(path + ": cannot open the executor manager configuration");
  std::stringstream ss;
  ss << in.rdbuf();
  auto slash = path.rfind('/');
  std::string base = slash == std::string::npos ? "." : path.substr(0, slash);
  std::string name = path;
  return parse(ss.str(), name, base);
}

} // namespace rfaas::manager
