#include "executor_manager/config.hpp"

#include <pwd.h>

#include <cctype>
#include <cstdlib>

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include <rdmalib/config_node.hpp>

#include "common/log_level_name.hpp"

#include "protocol/protocol.hpp"

namespace rfaas::manager {

namespace {
/// A user name, a uid, or uid:gid of this host; never root.
bool resolve_user(const std::string &text, uid_t &uid, gid_t &gid) {
  if (text.empty())
    return false;
  if (std::isdigit(static_cast<unsigned char>(text[0]))) {
    char *end = nullptr;
    unsigned long u = std::strtoul(text.c_str(), &end, 10);
    unsigned long g = u;
    if (*end == ':') {
      char *gend = nullptr;
      g = std::strtoul(end + 1, &gend, 10);
      if (gend == end + 1 || *gend != '\0')
        return false;
    } else if (*end != '\0') {
      return false;
    } else if (const passwd *pw = getpwuid(static_cast<uid_t>(u))) {
      g = pw->pw_gid;
    }
    if (u == 0 || g == 0 || u > 0xfffffffeul || g > 0xfffffffeul)
      return false;
    uid = static_cast<uid_t>(u);
    gid = static_cast<gid_t>(g);
    return true;
  }
  const passwd *pw = getpwnam(text.c_str());
  if (!pw || pw->pw_uid == 0 || pw->pw_gid == 0)
    return false;
  uid = pw->pw_uid;
  gid = pw->pw_gid;
  return true;
}
} // namespace

namespace {

std::string resolve(const std::string &base_dir, const std::string &p) {
  if (p.empty() || p[0] == '/' || base_dir.empty())
    return p;
  return base_dir + "/" + p;
}

int parse_cpu(const std::string &tok, const std::string &origin) {
  if (tok.empty() || tok.size() > 4 ||
      !std::all_of(tok.begin(), tok.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw ConfigError(origin + ": \"" + tok + "\" is not a CPU id; expected an integer 0..4095");
  int v = std::stoi(tok);
  if (v > 4095)
    throw ConfigError(origin + ": CPU id " + tok + " is out of range; expected 0..4095");
  return v;
}

} // namespace

std::vector<int> parse_core_list(const std::string &text, const std::string &origin) {
  std::vector<int> cores;
  std::set<int> seen;
  auto add = [&](int c) {
    if (!seen.insert(c).second)
      throw ConfigError(origin + ": CPU " + std::to_string(c) +
                        " is listed twice; list each CPU once");
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
      throw ConfigError(origin + ": range \"" + item + "\" is reversed; expected LOW-HIGH");
    for (int c = lo; c <= hi; ++c)
      add(c);
  }
  if (!any || text.back() == ',')
    throw ConfigError(origin + ": \"" + text +
                      "\" is not a CPU list; expected e.g. \"1\" or \"0-3,6\"");
  return cores;
}

namespace {

ManagerConfig parse_config(const rdmalib::ConfigNode &root, const std::string &base_dir) {
  using Node = rdmalib::ConfigNode;
  ManagerConfig c;
  root.expect_object({"device_database", "device", "listen", "resource_manager", "resources",
                      "limits", "executor", "deadlines_ms", "admission", "log"});
  c.device_database =
      resolve(base_dir, root.required("device_database", "the path of the device database, e.g. "
                                                         "\"devices.json\"")
                            .string());
  c.device = root.required("device", "the name of the device entry to listen on").string();

  if (root.has("listen")) {
    Node l = root["listen"];
    l.expect_object({"host", "port"});
    l.optional("host", c.listen_host);
    l.optional("port", c.listen_port, 0, 65535);
  }
  if (root.has("resource_manager")) {
    Node r = root["resource_manager"];
    r.expect_object({"enabled", "address", "secret_file", "node", "connect_ms",
                     "accounting_interval_ms", "ended_leases_file"});
    r.optional("enabled", c.resource_manager_enabled);
    r.optional("address", c.resource_manager_address);
    r.optional("node", c.resource_manager_node);
    r.optional("connect_ms", c.resource_manager_connect_ms, 1, 30000);
    r.optional("accounting_interval_ms", c.accounting_interval_ms, 0, 86400000);
    if (r.has("secret_file"))
      c.resource_manager_secret_file = resolve(base_dir, r["secret_file"].string());
    if (r.has("ended_leases_file"))
      c.resource_manager_ended_file = resolve(base_dir, r["ended_leases_file"].nonempty_string());
    else if (!c.resource_manager_secret_file.empty())
      c.resource_manager_ended_file = c.resource_manager_secret_file + ".ended";
    if (c.resource_manager_enabled && c.resource_manager_address.empty())
      r.fail("enabled is true but \"address\" (the resource manager's fabric host:port) is "
             "missing");
    if (c.resource_manager_enabled && c.resource_manager_secret_file.empty())
      r.fail("enabled is true but \"secret_file\" (the node secret shared with the resource "
             "manager) is missing");
  }
  {
    Node r = root.required("resources", "an object with at least \"cores\"");
    r.expect_object({"cores", "memory_mib", "max_allocations"});
    Node cores = r.required("cores", "CPU ids for workers, e.g. [1, 2] or \"1-2\"");
    if (cores.json().is_string()) {
      try {
        c.cores = parse_core_list(cores.string(), cores.origin() + ": " + cores.path());
      } catch (const ConfigError &e) {
        throw rdmalib::Error(rdmalib::ErrorKind::Config, e.what());
      }
    } else if (cores.json().is_array()) {
      std::set<int> seen;
      size_t n = cores.expect_array();
      for (size_t i = 0; i < n; ++i) {
        int id = static_cast<int>(cores[i].integer(0, 4095));
        if (!seen.insert(id).second)
          cores[i].fail("CPU " + std::to_string(id) + " is listed twice; list each CPU once");
        c.cores.push_back(id);
      }
    } else {
      cores.fail("expected an array of CPU ids or a CPU list string, got " + cores.shown());
    }
    if (c.cores.empty())
      cores.fail("empty; expected at least one core for the manager to lease");
    if (c.cores.size() > protocol::kMaxWorkers)
      cores.fail("more than " + std::to_string(protocol::kMaxWorkers) + " cores");
    r.optional("memory_mib", c.memory_mib, 16, 1u << 24);
    r.optional("max_allocations", c.max_allocations, 1, 4096);
  }
  if (root.has("limits")) {
    Node l = root["limits"];
    l.expect_object({"max_input_slots", "max_slot_size", "max_library_size", "default_memory_mib"});
    l.optional("max_input_slots", c.max_input_slots, 1, protocol::kMaxSlots);
    l.optional("max_slot_size", c.max_slot_size, protocol::kSlotPrefix + 1, protocol::kMaxSlotSize);
    l.optional("max_library_size", c.max_library_size, 1, protocol::kMaxLibrarySize);
    l.optional("default_memory_mib", c.default_memory_mib, 16, 1u << 24);
    if (c.default_memory_mib > c.memory_mib)
      l["default_memory_mib"].fail("larger than resources.memory_mib (" +
                                   std::to_string(c.memory_mib) + "); expected at most that");
  }
  if (c.default_memory_mib > c.memory_mib)
    root["resources"]["memory_mib"].fail(
        "smaller than the default limit of an executor (" + std::to_string(c.default_memory_mib) +
        " MiB, limits.default_memory_mib); expected at least that");
  if (root.has("executor")) {
    Node e = root["executor"];
    e.expect_object({"zygote", "pool", "sandbox", "user", "seccomp", "cgroup_parent",
                     "max_processes", "max_open_files", "tmp_mib", "oci", "command"});
    e.optional("zygote", c.zygote);
    e.optional("pool", c.executor_pool, 0, 64);
    if (e.has("sandbox")) {
      std::string kind;
      e.optional("sandbox", kind);
      try {
        c.sandbox.kind = server::parse_sandbox_kind(kind);
      } catch (const std::invalid_argument &) {
        e["sandbox"].fail("unknown sandbox kind \"" + kind +
                          "\"; expected \"namespaces\" (the default), \"oci\", \"command\" or "
                          "\"process\"");
      }
    }
    if (e.has("user")) {
      std::string user;
      e.optional("user", user);
      if (!resolve_user(user, c.sandbox.uid, c.sandbox.gid))
        e["user"].fail("no such user \"" + user +
                       "\"; expected a user name or uid[:gid] of this host, not root");
    }
    e.optional("seccomp", c.sandbox.seccomp);
    e.optional("cgroup_parent", c.sandbox.cgroup_parent);
    if (c.sandbox.cgroup_parent.empty() ||
        c.sandbox.cgroup_parent.find("..") != std::string::npos ||
        c.sandbox.cgroup_parent[0] == '/')
      e["cgroup_parent"].fail("expected a relative cgroup path without \"..\"");
    e.optional("max_processes", c.sandbox.max_processes, 8, 1u << 20);
    e.optional("max_open_files", c.sandbox.max_open_files, 64, 1u << 20);
    e.optional("tmp_mib", c.sandbox.tmp_mib, 1, 1u << 20);
    // An argv list: strings without a line break (the zygote gets them one
    // per line).
    auto argv = [](const Node &list, std::vector<std::string> &out) {
      size_t n = list.expect_array();
      out.clear();
      for (size_t i = 0; i < n; ++i) {
        std::string a = list[i].string();
        if (a.find('\n') != std::string::npos || a.find('\0') != std::string::npos)
          list[i].fail("a line break or NUL in an argument; expected one argument per string");
        out.push_back(std::move(a));
      }
    };
    if (e.has("oci")) {
      Node o = e["oci"];
      o.expect_object(
          {"image", "images", "podman", "run_options", "pool", "host_code", "executor"});
      c.sandbox.oci_image = o.required("image", "the image executors run in").nonempty_string();
      if (o.has("images")) {
        argv(o["images"], c.sandbox.oci_images);
        if (c.sandbox.oci_images.size() > 1000)
          o["images"].fail("more than 1000 images");
        for (size_t i = 0; i < c.sandbox.oci_images.size(); ++i)
          if (c.sandbox.oci_images[i].empty())
            o["images"][i].fail("empty; expected an image name");
      }
      if (o.has("podman")) {
        argv(o["podman"], c.sandbox.oci_podman);
        if (c.sandbox.oci_podman.empty())
          o["podman"].fail("empty; expected the podman command, e.g. [\"podman\"]");
      }
      if (o.has("run_options"))
        argv(o["run_options"], c.sandbox.oci_run_options);
      o.optional("pool", c.sandbox.oci_pool, 0, 64);
      o.optional("host_code", c.sandbox.oci_host_code);
      o.optional("executor", c.sandbox.oci_executor);
      if (!c.sandbox.oci_host_code && c.sandbox.oci_executor.empty())
        o["host_code"].fail("false without \"executor\"; expected the executor's path inside "
                            "the image");
    }
    if (e.has("command")) {
      argv(e["command"], c.sandbox.command);
      if (c.sandbox.command.empty())
        e["command"].fail("empty; expected the argv template of the command kind");
    }
    if (c.sandbox.kind == server::SandboxKind::Oci && c.sandbox.oci_image.empty())
      e.required("oci", "the \"oci\" object with the image for the oci sandbox");
    if (c.sandbox.kind == server::SandboxKind::Command && c.sandbox.command.empty())
      e.required("command", "the argv template for the command sandbox");
  }
  if (root.has("deadlines_ms")) {
    Node d = root["deadlines_ms"];
    d.expect_object(
        {"connect", "executor_start", "workers_connected", "library_loaded", "shutdown_grace"});
    // At most 1 s: accepting and answering block the manager's loop, which
    // must react to SIGTERM within a second.
    d.optional("connect", c.connect_ms, 1, 1000);
    d.optional("executor_start", c.executor_start_ms, 1, 3600000);
    d.optional("workers_connected", c.workers_connected_ms, 1, 3600000);
    d.optional("library_loaded", c.library_loaded_ms, 1, 3600000);
    d.optional("shutdown_grace", c.shutdown_grace_ms, 1, 3600000);
  }
  if (root.has("admission")) {
    Node a = root["admission"];
    a.expect_object({"max_pending", "max_pending_per_peer", "request_ms", "stats_interval_s"});
    AdmissionConfig &ad = c.admission;
    a.optional("max_pending", ad.max_pending, 1, 65536);
    a.optional("max_pending_per_peer", ad.max_pending_per_peer, 1, 65536);
    a.optional("request_ms", ad.request_ms, 1, 3600000);
    a.optional("stats_interval_s", ad.stats_interval_s, 0, 86400);
    if (!a.has("max_pending_per_peer"))
      ad.max_pending_per_peer = std::min(ad.max_pending_per_peer, ad.max_pending);
    else if (ad.max_pending_per_peer > ad.max_pending)
      a["max_pending_per_peer"].fail("larger than admission.max_pending (" +
                                     std::to_string(ad.max_pending) + "); expected at most that");
  }
  if (root.has("log")) {
    Node l = root["log"];
    l.expect_object({"level", "accounting"});
    if (l.has("level"))
      c.log_level = l["level"].enumeration(rfaas::server::parse_log_level_name,
                                           rfaas::server::kLogLevelNames);
    l.optional("accounting", c.log_accounting);
  }
  return c;
}

} // namespace

ManagerConfig ManagerConfig::parse(const std::string &json_text, const std::string &origin,
                                   const std::string &base_dir) {
  // One reader and one message format for every configuration file
  // (rdmalib::ConfigNode); the manager reports them as its own ConfigError.
  try {
    nlohmann::json doc = rdmalib::ConfigNode::parse(json_text, origin);
    return parse_config(rdmalib::ConfigNode(doc, origin), base_dir);
  } catch (const rdmalib::Error &e) {
    throw ConfigError(e.what());
  }
}

ManagerConfig ManagerConfig::load(const std::string &path) {
  std::string text;
  try {
    text = rdmalib::ConfigNode::read_file(path, "the executor manager configuration");
  } catch (const rdmalib::Error &e) {
    throw ConfigError(e.what());
  }
  auto slash = path.rfind('/');
  std::string base = slash == std::string::npos ? "." : path.substr(0, slash);
  return parse(text, path, base);
}

} // namespace rfaas::manager
