#include "resource_manager/config.hpp"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include <rdmalib/config_node.hpp>

#include "common/log_level_name.hpp"

namespace rfaas::rm {

namespace {

using Node = rdmalib::ConfigNode;

constexpr const char *kTokenHint =
    "an administrator token of at least 16 characters for changes through the REST API "
    "(e.g. `openssl rand -hex 32`)";

std::string resolve(const std::string &path, const std::string &base_dir) {
  if (path.empty() || path[0] == '/' || base_dir.empty())
    return path;
  return base_dir + "/" + path;
}

/// Tokens that example configurations ship with: a service started with one
/// would let anyone who read the example change it.
bool is_placeholder(const std::string &token) {
  std::string lower;
  for (char c : token)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.rfind("change-me", 0) == 0 || lower.rfind("changeme", 0) == 0;
}

/// A bearer token: `key`, or the first line of `key`_file (one of them;
/// `required` or absent -> empty).
std::string read_token(const Node &h, const std::string &base_dir, const std::string &key,
                       bool required) {
  const std::string file_key = key + "_file";
  if (h.has(key.c_str()) && h.has(file_key.c_str()))
    h.fail("both \"" + key + "\" and \"" + file_key + "\" given; expected one of them");
  auto check = [&](const Node &where, const std::string &token, const std::string &too_short) {
    if (token.size() < 16)
      where.fail(too_short + "; expected " + kTokenHint);
    if (is_placeholder(token))
      where.fail("the placeholder token of the shipped example (\"" + token +
                 "\") is refused; expected your own token, e.g. from `openssl rand -hex 32`, "
                 "best in http." +
                 file_key + " (a file only the service can read)");
  };
  if (h.has(file_key.c_str())) {
    Node f = h[file_key.c_str()];
    std::string file = resolve(f.nonempty_string(), base_dir);
    std::ifstream in(file);
    if (!in) {
      int err = errno;
      f.fail("cannot read " + file + ": " + std::strerror(err ? err : ENOENT) +
             "; expected a file whose first line is " + kTokenHint);
    }
    std::string token;
    std::getline(in, token);
    while (!token.empty() && (token.back() == '\r' || token.back() == ' '))
      token.pop_back();
    check(f, token,
          "the first line of " + file + " has " + std::to_string(token.size()) + " characters");
    return token;
  }
  if (!required && !h.has(key.c_str()))
    return {};
  Node t = h.required(key.c_str(), "\"" + key + "\" or \"" + file_key + "\": " + kTokenHint);
  std::string token = t.string();
  check(t, token, "too short (" + std::to_string(token.size()) + " characters)");
  return token;
}

void read_http(const Node &root, ResourceManagerConfig &c, const std::string &base_dir) {
  Node h = root.required("http",
                         std::string("an object with \"token\" or \"token_file\": ") + kTokenHint);
  h.expect_object({"host", "port", "threads", "token", "token_file", "read_token",
                   "read_token_file", "open_endpoints", "loop_timeout_ms", "max_connections",
                   "idle_timeout_ms"});
  c.admin_token = read_token(h, base_dir, "token", true);
  c.read_token = read_token(h, base_dir, "read_token", false);
  if (!c.read_token.empty() && c.read_token == c.admin_token)
    h[h.has("read_token") ? "read_token" : "read_token_file"].fail(
        "the same as the operator token; expected another token (or leave it out)");
  h.optional("host", c.http_host);
  h.optional("port", c.http_port, 0, 65535);
  h.optional("threads", c.http_threads, 1, 64);
  h.optional("loop_timeout_ms", c.http_loop_timeout_ms, 10, 600'000);
  // Each connection holds a descriptor: the hard limit here is 20,000, and
  // the fabric's connections need theirs too.
  h.optional("max_connections", c.http_max_connections, 1, 10'000);
  // Pistache looks for idle connections every 0.5 s: shorter would not hold.
  h.optional("idle_timeout_ms", c.http_idle_timeout_ms, 1000, 3'600'000);
  if (h.has("open_endpoints")) {
    Node open = h["open_endpoints"];
    const size_t n = open.expect_array();
    c.open_health = c.open_metrics = false;
    for (size_t i = 0; i < n; ++i) {
      const std::string e = open[i].string();
      if (e == "/health")
        c.open_health = true;
      else if (e == "/metrics")
        c.open_metrics = true;
      else
        open[i].fail("unknown endpoint \"" + e +
                     "\"; expected \"/health\" and/or \"/metrics\" (every other endpoint "
                     "needs a token)");
    }
  }
}

void read_leases(const Node &root, RegistryOptions &r) {
  if (!root.has("leases"))
    return;
  Node l = root["leases"];
  l.expect_object({"default_duration_ms", "max_duration_ms", "max_nodes", "default_memory_mib"});
  constexpr uint64_t kMonth = 30ull * 86400000;
  l.optional("default_duration_ms", r.default_lease_ms, 1000, kMonth);
  l.optional("max_duration_ms", r.max_lease_ms, 1000, kMonth);
  l.optional("max_nodes", r.max_nodes_per_lease, 1, 1024);
  l.optional("default_memory_mib", r.default_memory_mib, 1, 1ull << 32);
  if (r.default_lease_ms <= r.max_lease_ms)
    return;
  // Name the key the file gave; the other one holds its default.
  if (l.has("default_duration_ms"))
    l["default_duration_ms"].fail("longer than leases.max_duration_ms (" +
                                  std::to_string(r.max_lease_ms) + "); expected at most that");
  l["max_duration_ms"].fail("shorter than the default lease (leases.default_duration_ms, " +
                            std::to_string(r.default_lease_ms) + "); expected at least that");
}

/// One set of quota limits; absent keys stay unset (0 means no limit).
QuotaLimits read_limits(const Node &n) {
  n.expect_object({"cores", "memory_mib", "leases", "requests_per_minute"});
  QuotaLimits l;
  auto field = [&](const char *key, std::optional<uint64_t> &out, uint64_t max) {
    if (n.has(key))
      out = n[key].integer(0, max);
  };
  field("cores", l.cores, 1'000'000);
  field("memory_mib", l.memory_mib, 1ull << 40);
  field("leases", l.leases, 1'000'000);
  field("requests_per_minute", l.requests_per_minute, 1'000'000);
  return l;
}

void read_quotas(const Node &root, QuotaConfig &q) {
  if (!root.has("quotas"))
    return;
  Node n = root["quotas"];
  n.expect_object({"default", "users"});
  if (n.has("default"))
    q.defaults = read_limits(n["default"]).over(QuotaLimits{0, 0, 0, 0});
  if (!n.has("users"))
    return;
  Node users = n["users"];
  if (!users.json().is_object())
    users.fail("expected an object mapping a uid (\"1000\") or a client name to its limits, "
               "got " +
               users.shown());
  for (auto it = users.json().begin(); it != users.json().end(); ++it) {
    if (it.key().empty() || it.key().size() > 255)
      users.fail("a user key must be 1..255 characters (a uid or a client name)");
    q.users[QuotaUser::from_key(it.key()).key()] = read_limits(users[it.key().c_str()]);
  }
}

void read_fabric(const Node &root, FabricConfig &fc, const std::string &base_dir) {
  if (!root.has("fabric"))
    return;
  Node f = root["fabric"];
  f.expect_object({"device_database", "device", "host", "port", "accept_timeout_ms", "heartbeat_ms",
                   "registration_window_ms", "idle_timeout_ms", "max_connections",
                   "reserved_for_nodes", "client_idle_timeout_ms", "busy_poll_us"});
  fc.enabled = true;
  fc.device_database = resolve(
      f.required("device_database", "the device database, e.g. \"devices.json\"").nonempty_string(),
      base_dir);
  fc.device =
      f.required("device", "the device entry to listen on, e.g. \"lo-tcp\"").nonempty_string();
  f.optional("host", fc.host);
  f.optional("port", fc.port, 0, 65535);
  f.optional("accept_timeout_ms", fc.accept_timeout_ms, 10, 10'000);
  f.optional("heartbeat_ms", fc.heartbeat_ms, 10, 600'000);
  f.optional("registration_window_ms", fc.registration_window_ms, 1000, 86'400'000);
  f.optional("idle_timeout_ms", fc.idle_timeout_ms, 100, 600'000);
  f.optional("max_connections", fc.max_connections, 1, 100'000);
  f.optional("reserved_for_nodes", fc.reserved_for_nodes, 0, 100'000);
  f.optional("client_idle_timeout_ms", fc.client_idle_timeout_ms, 100, 86'400'000);
  f.optional("busy_poll_us", fc.busy_poll_us, 0, 10'000);
  if (fc.reserved_for_nodes >= fc.max_connections)
    f[f.has("reserved_for_nodes") ? "reserved_for_nodes" : "max_connections"].fail(
        "fabric.reserved_for_nodes (" + std::to_string(fc.reserved_for_nodes) +
        ") must be below fabric.max_connections (" + std::to_string(fc.max_connections) +
        "); expected room for at least one client");
}

bool parse_provider_kind(std::string_view text, NodeProviderKind &out) {
  if (text == "static")
    out = NodeProviderKind::Static;
  else if (text == "slurm")
    out = NodeProviderKind::Slurm;
  else
    return false;
  return true;
}

void read_strings(const Node &parent, const char *key, std::vector<std::string> &out) {
  if (!parent.has(key))
    return;
  Node list = parent[key];
  const size_t n = list.expect_array();
  out.clear();
  for (size_t i = 0; i < n; ++i) {
    std::string v = list[i].string();
    // Each goes on a line of its own in the batch script.
    if (v.find_first_of("\n\r") != std::string::npos)
      list[i].fail("contains a line break; expected one option per entry");
    out.push_back(std::move(v));
  }
}

void read_node_provider(const Node &root, ResourceManagerConfig &c, const std::string &base_dir) {
  if (!root.has("nodes"))
    return;
  Node n = root["nodes"];
  if (n.has("provider"))
    c.node_provider = n["provider"].enumeration(parse_provider_kind, "static, slurm");
  if (c.node_provider == NodeProviderKind::Static) {
    if (n.has("slurm"))
      n["slurm"].fail("given, but nodes.provider is \"static\"; expected \"provider\": "
                      "\"slurm\" with it, or no \"slurm\" block");
    return;
  }
  if (!c.fabric.enabled)
    n["provider"].fail("\"slurm\" needs the \"fabric\" block: pilots' executor managers "
                       "register over the fabric");
  SlurmProviderConfig &s = c.slurm;
  Node b = n.required("slurm", "an object with \"rfaas_slurm\" and \"work_dir\" (and "
                               "min_nodes, max_nodes, partition, ...)");
  b.expect_object({"min_nodes", "max_nodes", "nodes_per_job", "idle_timeout_ms", "partition",
                   "account", "time_limit", "sbatch", "job_name", "work_dir", "rfaas_slurm",
                   "pilot_options", "resource_manager_address", "retry_after_ms", "poll_ms",
                   "command_timeout_ms", "start_timeout_ms", "slurm_bin_dir"});
  b.optional("min_nodes", s.min_nodes, 0, 100'000);
  b.optional("max_nodes", s.max_nodes, 1, 100'000);
  b.optional("nodes_per_job", s.nodes_per_job, 1, 100'000);
  b.optional("idle_timeout_ms", s.idle_timeout_ms, 100, 30ull * 86'400'000);
  b.optional("partition", s.partition);
  b.optional("account", s.account);
  b.optional("time_limit", s.time_limit);
  read_strings(b, "sbatch", s.sbatch);
  b.optional("job_name", s.job_name);
  s.work_dir = resolve(
      b.required("work_dir", "a directory for the pilots' scripts, secrets and logs, on a file "
                             "system the compute nodes see")
          .nonempty_string(),
      base_dir);
  s.rfaas_slurm =
      resolve(b.required("rfaas_slurm", "the path of the rfaas-slurm script (installed in bin/)")
                  .nonempty_string(),
              base_dir);
  read_strings(b, "pilot_options", s.pilot_options);
  b.optional("resource_manager_address", s.resource_manager_address);
  b.optional("retry_after_ms", s.retry_after_ms, 10, 600'000);
  b.optional("poll_ms", s.poll_ms, 50, 600'000);
  b.optional("command_timeout_ms", s.command_timeout_ms, 100, 600'000);
  b.optional("start_timeout_ms", s.start_timeout_ms, 1000, 30ull * 86'400'000);
  b.optional("slurm_bin_dir", s.slurm_bin_dir);
  for (const char *key : {"time_limit", "partition", "account", "job_name"}) {
    if (!b.has(key))
      continue;
    const std::string v = b[key].string();
    if (v.find_first_of(" \t\n\r'\"\\") != std::string::npos)
      b[key].fail("contains a blank or a quote; expected one SLURM word");
  }
  if (s.job_name.empty())
    b["job_name"].fail("empty; expected a name the pilots' jobs carry");
  if (s.min_nodes > s.max_nodes)
    b[b.has("min_nodes") ? "min_nodes" : "max_nodes"].fail(
        "nodes.slurm.min_nodes (" + std::to_string(s.min_nodes) + ") is above max_nodes (" +
        std::to_string(s.max_nodes) + "); expected min_nodes <= max_nodes");
  if (s.nodes_per_job > s.max_nodes)
    b["nodes_per_job"].fail("above nodes.slurm.max_nodes (" + std::to_string(s.max_nodes) +
                            "); expected a pilot no larger than the pool");
}

ResourceManagerConfig read_config(const Node &root, const std::string &base_dir) {
  ResourceManagerConfig c;
  root.expect_object({"database", "http", "fabric", "placement", "leases", "nodes", "tick_ms",
                      "retention_days", "quotas", "log", "auth", "munge_socket"});
  root.optional("retention_days", c.registry.retention_days, 0, 36'500);
  if (root.has("database"))
    c.database = root["database"].nonempty_string();
  c.database = resolve(c.database, base_dir);
  read_http(root, c, base_dir);
  if (root.has("placement"))
    c.registry.policy = root["placement"].enumeration(parse_placement_policy, "spread, pack");
  read_leases(root, c.registry);
  read_quotas(root, c.registry.quotas);
  if (root.has("nodes")) {
    Node n = root["nodes"];
    n.expect_object({"heartbeat_timeout_ms", "provider", "slurm"});
    n.optional("heartbeat_timeout_ms", c.registry.heartbeat_timeout_ms, 100, 3'600'000);
  }
  read_fabric(root, c.fabric, base_dir);
  read_node_provider(root, c, base_dir);
  if (root.has("auth"))
    c.fabric.auth = root["auth"].enumeration(parse_client_auth_mode, "none, munge");
  if (root.has("munge_socket"))
    c.fabric.munge_socket = resolve(root["munge_socket"].nonempty_string(), base_dir);
  // Nodes are asked to beat faster than they are declared down; name the key
  // the file gave (the other one holds its default).
  if (c.fabric.enabled && c.fabric.heartbeat_ms >= c.registry.heartbeat_timeout_ms) {
    const std::string timeout = std::to_string(c.registry.heartbeat_timeout_ms);
    if (root["fabric"].has("heartbeat_ms"))
      root["fabric"]["heartbeat_ms"].fail("not shorter than nodes.heartbeat_timeout_ms (" +
                                          timeout + "); expected less than that");
    root["nodes"]["heartbeat_timeout_ms"].fail("not longer than fabric.heartbeat_ms (" +
                                               std::to_string(c.fabric.heartbeat_ms) +
                                               ", the default); expected more than that");
  }
  root.optional("tick_ms", c.tick_ms, 10, 60'000);
  if (root.has("log")) {
    Node l = root["log"];
    l.expect_object({"level"});
    if (l.has("level"))
      c.log_level = l["level"].enumeration(rfaas::server::parse_log_level_name,
                                           rfaas::server::kLogLevelNames);
  }
  return c;
}

} // namespace

ResourceManagerConfig ResourceManagerConfig::load(const std::string &path) {
  std::string text;
  try {
    text = rdmalib::ConfigNode::read_file(
        path, "the resource manager configuration (example: config/resource_manager.json)");
  } catch (const rdmalib::Error &e) {
    throw ConfigError(e.what());
  }
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  return parse(text, path, dir);
}

ResourceManagerConfig ResourceManagerConfig::parse(const std::string &text,
                                                   const std::string &origin,
                                                   const std::string &base_dir) {
  // One reader and one message format for every configuration file
  // (rdmalib::ConfigNode); reported as the resource manager's ConfigError.
  try {
    nlohmann::json doc = rdmalib::ConfigNode::parse(text, origin);
    return read_config(rdmalib::ConfigNode(doc, origin), base_dir);
  } catch (const rdmalib::Error &e) {
    throw ConfigError(e.what());
  }
}

} // namespace rfaas::rm
