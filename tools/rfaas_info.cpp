// rfaas-info: what rdmalib sees on this machine.
//
// Prints the network backend chosen at build time and its run-time version, the
// providers/devices the backend can use here and, for a chosen device, the
// capabilities negotiated when a Fabric opens on it: the values every upper layer
// branches on. It also writes a device database for this machine, so operators
// start from entries that are known to open.
//
// Uses rdmalib's public API only, so it works unchanged with either backend.
// Exit codes: 0 success, 1 failure (nothing to open, backend error, I/O error),
// 2 bad usage.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "options.hpp"
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <rdmalib/config.hpp>
#include <rdmalib/logger.hpp>
#include <rdmalib/rdmalib.hpp>

#include "cli.hpp"

namespace {

using json = nlohmann::ordered_json;

constexpr int ExitOk = 0;
constexpr int ExitFailure = 1;
constexpr int ExitUsage = 2;

/// A malformed command line: reported with a pointer to --help, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  bool json = false;
  bool verbose = false;
  std::string log_level; // --log-level, validated
  bool verify = true;
  std::string device;
  std::string devices;
  std::string write_devices;
  bool provider_given = false;
  std::string provider;
  bool endpoint_given = false;
  rdmalib::EndpointPreference endpoint = rdmalib::EndpointPreference::Auto;
  std::string disable_caps;

  /// Open one or more fabrics (any selection option given).
  bool open_fabric() const {
    return !device.empty() || !devices.empty() || provider_given || endpoint_given;
  }
};

// ---- small helpers ------------------------------------------------------------

rdmalib::EndpointPreference parse_endpoint(const std::string &text) {
  rdmalib::EndpointPreference e;
  if (!rdmalib::parse_endpoint_preference(text, e))
    throw UsageError("--endpoint: expected one of " +
                     std::string(rdmalib::endpoint_preference_names()) + ", not \"" + text + "\"");
  return e;
}

bool is_ipv4(const std::string &text) {
  in_addr a{};
  return inet_pton(AF_INET, text.c_str(), &a) == 1;
}

bool is_ip_literal(const std::string &text) {
  in6_addr a6{};
  return is_ipv4(text) || inet_pton(AF_INET6, text.c_str(), &a6) == 1;
}

bool is_loopback_ip(const std::string &ip) { return ip.compare(0, 4, "127.") == 0 || ip == "::1"; }

bool is_link_local_ip(const std::string &ip) {
  return ip.compare(0, 4, "fe80") == 0 || ip.compare(0, 8, "169.254.") == 0;
}

/// The local network interfaces and their IP addresses (getifaddrs), so
/// database entries can name the interface an address lives on.
class Interfaces {
public:
  Interfaces() {
    ifaddrs *list = nullptr;
    if (getifaddrs(&list) != 0)
      return; // Informational only: entries then carry no interface name.
    for (ifaddrs *i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || !i->ifa_name)
        continue;
      char text[INET6_ADDRSTRLEN] = {};
      int family = i->ifa_addr->sa_family;
      if (family == AF_INET) {
        auto *sin = reinterpret_cast<const sockaddr_in *>(i->ifa_addr);
        inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
      } else if (family == AF_INET6) {
        auto *sin6 = reinterpret_cast<const sockaddr_in6 *>(i->ifa_addr);
        inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text));
      } else {
        continue;
      }
      by_ip_.emplace(text, i->ifa_name);
    }
    freeifaddrs(list);
  }

  /// Interface holding `ip`, or "" if none does.
  std::string name_of(const std::string &ip) const {
    auto it = by_ip_.find(ip);
    return it == by_ip_.end() ? std::string() : it->second;
  }

  /// First IPv4 address of interface `name`, or "".
  std::string ipv4_of(const std::string &name) const {
    for (const auto &entry : by_ip_)
      if (entry.second == name && is_ipv4(entry.first))
        return entry.first;
    return {};
  }

  /// Name of the loopback interface ("lo" on Linux).
  std::string loopback() const {
    std::string name = name_of("127.0.0.1");
    return name.empty() ? "lo" : name;
  }

private:
  std::map<std::string, std::string> by_ip_;
};

/// A provider's name as it appears in device names: "tcp;ofi_rxm" -> "rxm"
/// (its short alias, the name config/devices.json ships), "verbs;ofi_rxm" ->
/// "verbs-rxm", "" (automatic choice) -> "auto"; others unchanged.
std::string provider_slug(const std::string &provider) {
  if (provider.empty())
    return "auto";
  std::string out;
  auto util = provider.find(";ofi_");
  if (util != std::string::npos) {
    std::string core = provider.substr(0, util);
    std::string layer = provider.substr(util + 5);
    // tcp is RxM's default core provider: libfabric itself lists it as plain "rxm".
    out = core == "tcp" ? layer : core + "-" + layer;
  } else {
    out = provider;
  }
  for (char &c : out)
    if (c == ';' || c == ' ' || c == '/')
      c = '-';
  return out;
}

std::string join(const std::vector<std::string> &items, const char *sep) {
  std::string out;
  for (const auto &s : items) {
    if (!out.empty())
      out += sep;
    out += s;
  }
  return out;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// ---- JSON views of rdmalib values ---------------------------------------------------

json to_json(const rdmalib::Capabilities &c) {
  return json{{"endpoint", rdmalib::to_string(c.endpoint)},
              {"progress", rdmalib::to_string(c.progress)},
              {"remote_cq_data", c.remote_cq_data},
              {"atomics", c.atomics},
              {"provider_keys", c.provider_keys},
              {"virtual_addressing", c.virtual_addressing},
              {"local_registration", c.local_registration},
              {"endpoint_bound_memory", c.endpoint_bound_memory},
              {"write_consumes_receive", c.write_consumes_receive},
              {"notify_message_size", c.notify_message_size},
              {"wait_fd", c.wait_fd},
              {"max_inline", c.max_inline},
              {"max_message", c.max_message},
              {"mr_key_size", c.mr_key_size},
              {"max_private_data", c.max_private_data}};
}

json to_json(const rdmalib::DeviceConfig &d) {
  return json{{"name", d.name},
              {"provider", d.provider},
              {"domain", d.domain},
              {"interface", d.interface},
              {"ip_address", d.ip_address},
              {"port", d.port},
              {"max_inline_data", d.max_inline_data},
              {"default_receive_buffer_size", d.default_receive_buffer_size},
              {"endpoint", rdmalib::to_string(d.endpoint)}};
}

json to_json(const rdmalib::ProviderInfo &p) {
  return json{{"provider", p.provider},
              {"domain", p.domain},
              {"fabric", p.fabric},
              {"endpoint", rdmalib::to_string(p.endpoint)},
              {"ip_address", p.ip_address}};
}

json error_json(const rdmalib::Error &e) {
  return json{{"kind", rdmalib::to_string(e.kind())}, {"message", e.what()}};
}

// ---- opening fabrics ------------------------------------------------------------

/// Open `config` with `mask`, report what was negotiated. Never throws for a
/// backend failure: the error goes into the report.
json open_report(const rdmalib::DeviceConfig &config, rdmalib::CapabilityMask mask) {
  json report{{"config", to_json(config)}};
  auto start = std::chrono::steady_clock::now();
  try {
    rdmalib::Fabric fabric(config, mask);
    report["opened"] = true;
    report["open_ms"] = ms_since(start);
    report["provider"] = fabric.provider();
    report["description"] = fabric.describe();
    report["mask"] = fabric.mask().to_string();
    report["capabilities"] = to_json(fabric.capabilities());
  } catch (const rdmalib::Error &e) {
    report["opened"] = false;
    report["error"] = error_json(e);
  }
  return report;
}

/// The device configurations the command line selects.
std::vector<rdmalib::DeviceConfig> selected_configs(const Options &opt,
                                                    const Interfaces &interfaces) {
  std::vector<rdmalib::DeviceConfig> configs;
  if (!opt.devices.empty()) {
    // Config errors here (malformed file) name the file and key; they are
    // failures, not usage errors.
    auto db = rdmalib::DeviceDatabase::load(opt.devices);
    if (!opt.device.empty())
      configs.push_back(db.find(opt.device));
    else
      configs = db.devices();
    if (configs.empty())
      throw rdmalib::Error(rdmalib::ErrorKind::Config,
                           opt.devices + ": the device database has no entries");
  } else {
    rdmalib::DeviceConfig c;
    if (opt.device.empty()) {
      c.name = "auto";
    } else if (is_ip_literal(opt.device)) {
      c.name = opt.device;
      c.ip_address = opt.device;
      c.interface = interfaces.name_of(opt.device);
    } else {
      // A domain / device name ("lo", "eth0", "rxe0"); give IP providers the
      // interface's address when it is one.
      c.name = opt.device;
      c.domain = opt.device;
      c.ip_address = interfaces.ipv4_of(opt.device);
      if (!c.ip_address.empty())
        c.interface = opt.device;
    }
    configs.push_back(c);
  }
  for (auto &c : configs) {
    if (opt.provider_given)
      c.provider = opt.provider;
    if (opt.endpoint_given)
      c.endpoint = opt.endpoint;
  }
  return configs;
}

// ---- device database generation ---------------------------------------------------

struct Candidate {
  rdmalib::DeviceConfig config;
  std::string group; // interface + provider, for naming
};

/// One entry per usable provider/endpoint on loopback (127.0.0.1, port 0), plus
/// one per provider/endpoint on each real interface (IPv4 preferred, link-local
/// addresses skipped), and with `with_auto` one automatic entry on loopback.
std::vector<Candidate> database_candidates(const std::vector<rdmalib::ProviderInfo> &found,
                                           const Interfaces &interfaces, bool with_auto) {
  std::vector<Candidate> out;
  std::set<std::string> seen;
  auto key = [](const rdmalib::ProviderInfo &p, const std::string &where) {
    return p.provider + "|" + rdmalib::to_string(p.endpoint) + "|" + where;
  };
  auto make = [](const rdmalib::ProviderInfo &p, const std::string &interface,
                 const std::string &ip) {
    Candidate c;
    c.config.provider = p.provider;
    c.config.domain = p.domain;
    c.config.interface = interface;
    c.config.ip_address = ip;
    c.config.port = 0;
    c.config.endpoint = p.endpoint == rdmalib::EndpointType::Connected
                            ? rdmalib::EndpointPreference::Connected
                            : rdmalib::EndpointPreference::ReliableDatagram;
    c.group = interface + "-" + provider_slug(p.provider);
    return c;
  };

  const std::string lo = interfaces.loopback();
  // Loopback: providers reported on a loopback address (IPv4 first), then
  // node-local providers that have no IP address at all (shared memory).
  for (int pass = 0; pass < 3; ++pass) {
    for (const auto &p : found) {
      bool take = pass == 0   ? is_ipv4(p.ip_address) && is_loopback_ip(p.ip_address)
                  : pass == 1 ? !is_ipv4(p.ip_address) && is_loopback_ip(p.ip_address)
                              : p.ip_address.empty();
      if (take && seen.insert(key(p, "loopback")).second)
        out.push_back(make(p, lo, "127.0.0.1"));
    }
  }
  // Real interfaces: IPv4 first, IPv6 only where an interface has no IPv4.
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto &p : found) {
      const std::string &ip = p.ip_address;
      if (ip.empty() || is_loopback_ip(ip) || is_link_local_ip(ip) || is_ipv4(ip) != (pass == 0))
        continue;
      std::string interface = interfaces.name_of(ip);
      if (interface.empty())
        interface = p.domain;
      if (seen.insert(key(p, interface)).second)
        out.push_back(make(p, interface, ip));
    }
  }

  // One entry that lets rdmalib choose (provider "", endpoint auto) on
  // loopback, when anything at all was found there.
  if (with_auto && !out.empty() && out.front().config.interface == lo) {
    Candidate c;
    c.config.interface = lo;
    c.config.ip_address = "127.0.0.1";
    c.config.endpoint = rdmalib::EndpointPreference::Auto;
    c.group = lo + "-" + provider_slug("");
    out.push_back(c);
  }

  // Names, the same as the shipped config/devices.json: "<interface>-<provider>",
  // with "-rdm" on the reliable-datagram entry when one provider is listed with
  // both endpoint types on the same interface ("lo-sockets", "lo-sockets-rdm"),
  // then "-2", "-3"... for anything still ambiguous.
  std::map<std::string, std::set<int>> endpoints_per_group;
  for (const auto &c : out)
    endpoints_per_group[c.group].insert(static_cast<int>(c.config.endpoint));
  std::set<std::string> names;
  for (auto &c : out) {
    std::string name = c.group;
    if (endpoints_per_group[c.group].size() > 1 &&
        c.config.endpoint == rdmalib::EndpointPreference::ReliableDatagram)
      name += "-rdm";
    std::string unique = name;
    for (int n = 2; !names.insert(unique).second; ++n)
      unique = name + "-" + std::to_string(n);
    c.config.name = unique;
  }
  return out;
}

/// Write the device database, keeping (unless !verify) only entries whose
/// Fabric opens. Returns the JSON report; throws rdmalib::Error when nothing is
/// usable or the file cannot be written.
json write_database(const Options &opt, const std::vector<rdmalib::ProviderInfo> &found,
                    const Interfaces &interfaces) {
  json report{{"path", opt.write_devices}, {"verified", opt.verify}};
  json written = json::array();
  json skipped = json::array();
  std::vector<rdmalib::DeviceConfig> keep;
  for (const auto &c : database_candidates(found, interfaces, !opt.provider_given)) {
    if (opt.verify) {
      // The database describes the hardware, so verify without any mask.
      json r = open_report(c.config, rdmalib::CapabilityMask{});
      if (!r["opened"].get<bool>()) {
        skipped.push_back({{"name", c.config.name}, {"error", r["error"]}});
        continue;
      }
    }
    keep.push_back(c.config);
    written.push_back(to_json(c.config));
  }
  if (keep.empty())
    throw rdmalib::Error(rdmalib::ErrorKind::NotFound,
                         "rfaas-info: no usable provider found; nothing written to " +
                             opt.write_devices);
  rdmalib::DeviceDatabase db(keep);
  db.save(opt.write_devices);
  // Read it back: what we wrote must be accepted by the loader.
  rdmalib::DeviceDatabase::load(opt.write_devices);
  report["devices"] = written;
  report["skipped"] = skipped;
  return report;
}

// ---- text output ------------------------------------------------------------------

/// Print rows as left-aligned columns separated by two spaces.
void print_table(std::ostream &os, const std::vector<std::vector<std::string>> &rows,
                 const std::string &indent) {
  std::vector<size_t> width;
  for (const auto &row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i)
        width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  for (const auto &row : rows) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size())
        line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    os << line << '\n';
  }
}

std::string or_dash(const std::string &s) { return s.empty() ? "-" : s; }

std::string value_text(const json &v) {
  if (v.is_boolean())
    return v.get<bool>() ? "yes" : "no";
  if (v.is_number_unsigned() && v.get<uint64_t>() == UINT64_MAX)
    return "unlimited";
  if (v.is_string())
    return v.get<std::string>();
  return v.dump();
}

std::string config_summary(const json &c) {
  std::ostringstream os;
  os << "provider " << or_dash(c["provider"].get<std::string>()) << ", endpoint "
     << c["endpoint"].get<std::string>();
  if (!c["domain"].get<std::string>().empty())
    os << ", domain " << c["domain"].get<std::string>();
  if (!c["ip_address"].get<std::string>().empty())
    os << ", " << c["ip_address"].get<std::string>() << ":" << c["port"].get<int>();
  return os.str();
}

void print_text(std::ostream &os, const json &doc) {
  const json &backend = doc["backend"];
  os << "rdmalib " << doc["rdmalib_version"].get<std::string>() << ", backend "
     << backend["name"].get<std::string>() << " " << backend["version"].get<std::string>() << "\n";
  os << "providers accepted: " << join(doc["known_providers"].get<std::vector<std::string>>(), ", ")
     << "\n";
  if (!doc["disabled_capabilities"].get<std::string>().empty())
    os << "capabilities disabled: " << doc["disabled_capabilities"].get<std::string>() << "\n";

  if (doc.contains("provider_filter"))
    os << "\nFound on this machine for provider " << doc["provider_filter"].get<std::string>()
       << " (fastest first):\n";
  else
    os << "\nFound on this machine (fastest first):\n";
  if (doc["found"].empty()) {
    os << "  nothing usable\n";
  } else {
    std::vector<std::vector<std::string>> rows{{"PROVIDER", "ENDPOINT", "DOMAIN", "FABRIC", "IP"}};
    for (const auto &p : doc["found"])
      rows.push_back({p["provider"].get<std::string>(), p["endpoint"].get<std::string>(),
                      or_dash(p["domain"].get<std::string>()),
                      or_dash(p["fabric"].get<std::string>()),
                      or_dash(p["ip_address"].get<std::string>())});
    print_table(os, rows, "  ");
  }

  if (doc.contains("fabrics")) {
    for (const auto &f : doc["fabrics"]) {
      const json &c = f["config"];
      os << "\nDevice \"" << c["name"].get<std::string>() << "\" (" << config_summary(c) << "):\n";
      if (!f["opened"].get<bool>()) {
        os << "  error: " << f["error"]["message"].get<std::string>() << "\n";
        continue;
      }
      char ms[32];
      std::snprintf(ms, sizeof(ms), "%.1f ms", f["open_ms"].get<double>());
      std::vector<std::vector<std::string>> rows{{"opened in", ms},
                                                 {"provider", f["provider"].get<std::string>()}};
      for (const auto &cap : f["capabilities"].items())
        rows.push_back({cap.key(), value_text(cap.value())});
      rows.push_back({"disabled by mask", or_dash(f["mask"].get<std::string>())});
      print_table(os, rows, "  ");
      os << "  " << f["description"].get<std::string>() << "\n";
    }
  }

  if (doc.contains("device_database")) {
    const json &db = doc["device_database"];
    os << "\nDevice database written to " << db["path"].get<std::string>() << " ("
       << db["devices"].size() << " entries"
       << (db["verified"].get<bool>() ? ", each opened successfully" : ", not verified") << "):\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto &d : db["devices"])
      rows.push_back({d["name"].get<std::string>(), d["provider"].get<std::string>(),
                      d["endpoint"].get<std::string>(), or_dash(d["domain"].get<std::string>()),
                      d["ip_address"].get<std::string>()});
    print_table(os, rows, "  ");
    if (!db["skipped"].empty()) {
      os << "Skipped (could not open):\n";
      for (const auto &s : db["skipped"])
        os << "  " << s["name"].get<std::string>() << ": "
           << s["error"]["message"].get<std::string>() << "\n";
    }
  }
}

// ---- command line -----------------------------------------------------------------

rfaas::cli::Options make_parser() {
  rfaas::cli::Options o("rfaas-info",
                        "Show the network backend, the providers and devices found and "
                        "the capabilities rdmalib negotiates; write a device database.");
  o.custom_help("[OPTIONS]");
  o.set_width(92);
  // clang-format off
  o.add_options()
    ("h,help", "Print this help and exit")
    ("V,version", "Print the rdmalib version and backend, then exit")
    ("json", "Print JSON instead of text")
    ("d,device", "Open this device: an entry name or IP address from --devices; without "
                 "--devices an IP address or a domain/device name (lo, eth0, rxe0)",
     rfaas::cli::value<std::string>(), "NAME|IP")
    ("devices", "Device database (JSON) to look --device up in; without --device, "
                "open every entry", rfaas::cli::value<std::string>(), "FILE")
    ("p,provider", "Provider to open, overriding the database entry (auto = automatic "
                   "choice); also lists and writes only its entries",
     rfaas::cli::value<std::string>(), "P")
    ("e,endpoint", "Endpoint type: connected, rdm or auto", rfaas::cli::value<std::string>(),
     "TYPE")
    ("disable-caps", "Also switch these capabilities off (comma-separated, added to "
                     "RDMALIB_DISABLE_CAPS)", rfaas::cli::value<std::string>(), "LIST")
    ("write-devices", "Write a device database for this machine to FILE",
     rfaas::cli::value<std::string>(), "FILE")
    ("no-verify", "With --write-devices: keep entries without opening each one first")
    ("reclaim-stale", "Remove the shared-memory regions that processes killed on this node "
     "left behind (unmapped for 30 s or more), print them, then exit")
    ("log-level", std::string("Log level on stderr: ") + rdmalib::log::valid_levels() +
                  " (default: $RFAAS_LOG_LEVEL, then warn)", rfaas::cli::value<std::string>(), "LEVEL")
    ("v,verbose", "Same as --log-level debug");
  // clang-format on
  return o;
}

const char *help_footer =
    "\n"
    "Without a selection option, rfaas-info prints the backend and what it found.\n"
    "Any of --device, --devices, --provider or --endpoint opens a Fabric and prints\n"
    "its negotiated capabilities.\n"
    "\n"
    "Environment:\n"
    "  RDMALIB_DISABLE_CAPS  capabilities to treat as absent, e.g. \"remote_cq_data,atomics\"\n"
    "                        (remote_cq_data, atomics, virtual_addressing, wait_fd, inline)\n"
    "\n"
    "Examples:\n"
    "  rfaas-info\n"
    "  rfaas-info --provider tcp --device 127.0.0.1\n"
    "  rfaas-info --provider \"tcp;ofi_rxm\" --endpoint rdm --json\n"
    "  rfaas-info --write-devices /tmp/devices.json\n"
    "  rfaas-info --devices config/devices.json --device lo-tcp\n"
    "  rfaas-info --reclaim-stale\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 bad usage.\n";

std::string required_value(const rfaas::cli::ParseResult &r, const char *name) {
  std::string v = r[name].as<std::string>();
  if (v.empty())
    throw UsageError(std::string("--") + name + " needs a non-empty value");
  return v;
}

/// Parse argv. Returns false when the program should exit 0 right away
/// (--help, --version), having printed what was asked.
bool parse_command_line(int argc, char **argv, Options &opt) {
  auto parser = make_parser();
  rfaas::cli::ParseResult r;
  try {
    r = parser.parse(argc, argv);
  } catch (const rfaas::cli::OptionError &e) {
    throw UsageError(e.what());
  }
  if (!r.unmatched().empty())
    throw UsageError("unexpected argument \"" + r.unmatched().front() + "\"");
  if (r.count("help")) {
    std::cout << parser.help() << help_footer;
    return false;
  }
  if (r.count("version")) {
    std::cout << rfaas::cli::version_text("rfaas-info") << "\n";
    return false;
  }
  if (r.count("reclaim-stale")) {
    rdmalib::Fabric::ReclaimReport rep = rdmalib::Fabric::reclaim_stale();
    for (const std::string &n : rep.names)
      std::cout << "removed " << n << "\n";
    std::cout << "reclaimed " << rep.names.size() << " stale region(s), " << (rep.bytes >> 20)
              << " MiB\n";
    return false;
  }
  opt.json = r.count("json") > 0;
  opt.verbose = r.count("verbose") > 0;
  if (r.count("log-level")) {
    opt.log_level = r["log-level"].as<std::string>();
    if (!rdmalib::log::parse_level(opt.log_level))
      throw UsageError("--log-level: unknown level \"" + opt.log_level +
                       "\"; valid levels: " + rdmalib::log::valid_levels());
  }
  opt.verify = r.count("no-verify") == 0;
  if (r.count("device"))
    opt.device = required_value(r, "device");
  if (r.count("devices"))
    opt.devices = required_value(r, "devices");
  if (r.count("write-devices"))
    opt.write_devices = required_value(r, "write-devices");
  if (r.count("provider")) {
    opt.provider_given = true;
    opt.provider = r["provider"].as<std::string>();
    if (opt.provider == "auto")
      opt.provider.clear();
  }
  if (r.count("endpoint")) {
    opt.endpoint_given = true;
    opt.endpoint = parse_endpoint(r["endpoint"].as<std::string>());
  }
  if (r.count("disable-caps"))
    opt.disable_caps = r["disable-caps"].as<std::string>();
  if (!opt.verify && opt.write_devices.empty())
    throw UsageError("--no-verify only applies to --write-devices");
  return true;
}

/// The capability mask in force: RDMALIB_DISABLE_CAPS plus --disable-caps.
/// A bad name in either is a usage error.
rdmalib::CapabilityMask capability_mask(const Options &opt) {
  rdmalib::CapabilityMask mask;
  try {
    mask = rdmalib::CapabilityMask::from_environment(); // its errors name the variable
  } catch (const rdmalib::Error &e) {
    throw UsageError(e.what());
  }
  try {
    return mask | rdmalib::CapabilityMask::parse(opt.disable_caps);
  } catch (const rdmalib::Error &e) {
    throw UsageError(std::string("--disable-caps: ") + e.what());
  }
}

void setup_logging(const Options &opt) {
  // Logs (the backend's included) go to stderr so that stdout stays parseable
  // with --json. Quiet by default: the report already shows what the start-up
  // line would say. --log-level, then --verbose, then RFAAS_LOG_LEVEL.
  spdlog::set_default_logger(rdmalib::log::get("rdmalib"));
  const char *env = std::getenv(rdmalib::log::kEnvVar);
  std::optional<rdmalib::log::Level> level;
  if (!opt.log_level.empty())
    level = rdmalib::log::parse_level(opt.log_level);
  else if (opt.verbose)
    level = rdmalib::log::Level::debug;
  else if (env && *env && !(level = rdmalib::log::parse_level(env)))
    throw UsageError(std::string(rdmalib::log::kEnvVar) + ": unknown level \"" + env +
                     "\"; valid levels: " + rdmalib::log::valid_levels());
  rdmalib::log::set_level(level.value_or(rdmalib::log::Level::warn));
}

int run(const Options &opt, rdmalib::CapabilityMask mask) {
  Interfaces interfaces;
  json doc;
  doc["rdmalib_version"] = RDMALIB_VERSION;
  doc["backend"] = {{"name", rdmalib::Fabric::backend_name()},
                    {"version", rdmalib::Fabric::backend_version()}};
  doc["known_providers"] = rdmalib::Fabric::known_providers();
  doc["disabled_capabilities"] = mask.to_string();
  std::vector<rdmalib::ProviderInfo> found = rdmalib::Fabric::discover();
  if (opt.provider_given && !opt.provider.empty()) {
    // --provider narrows what is listed (and written) to that provider; an
    // alias ("rxm") matches the canonical name discover() reports.
    std::string wanted = rdmalib::Fabric::canonical_provider(opt.provider);
    if (wanted.empty())
      wanted = opt.provider;
    found.erase(
        std::remove_if(found.begin(), found.end(),
                       [&](const rdmalib::ProviderInfo &p) { return p.provider != wanted; }),
        found.end());
    doc["provider_filter"] = wanted;
  }
  doc["found"] = json::array();
  for (const auto &p : found)
    doc["found"].push_back(to_json(p));

  int status = ExitOk;
  std::vector<std::string> errors;
  if (opt.open_fabric()) {
    doc["fabrics"] = json::array();
    for (const auto &config : selected_configs(opt, interfaces)) {
      json report = open_report(config, mask);
      if (!report["opened"].get<bool>()) {
        status = ExitFailure;
        errors.push_back(report["error"]["message"].get<std::string>());
      }
      doc["fabrics"].push_back(std::move(report));
    }
  }
  if (!opt.write_devices.empty())
    doc["device_database"] = write_database(opt, found, interfaces);

  if (opt.json) {
    std::cout << doc.dump(2) << std::endl;
    // stdout is for machines; tell the human too.
    for (const auto &e : errors)
      std::cerr << "rfaas-info: error: " << e << "\n";
  } else {
    print_text(std::cout, doc);
    std::cout.flush();
  }
  return status;
}

} // namespace

int main(int argc, char **argv) {
  Options opt;
  rdmalib::CapabilityMask mask;
  try {
    if (!parse_command_line(argc, argv, opt))
      return ExitOk;
    mask = capability_mask(opt);
    setup_logging(opt);
  } catch (const UsageError &e) {
    std::cerr << "rfaas-info: " << e.what() << "\nTry 'rfaas-info --help'.\n";
    return ExitUsage;
  }
  try {
    return run(opt, mask);
  } catch (const rdmalib::Error &e) {
    std::cerr << "rfaas-info: error: " << e.what() << "\n";
  } catch (const std::exception &e) {
    std::cerr << "rfaas-info: error: " << e.what() << "\n";
  }
  return ExitFailure;
}
