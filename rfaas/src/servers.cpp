#include <rfaas/errors.hpp>
#include <rfaas/servers.hpp>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace rfaas {

std::string server::endpoint() const {
  // IPv6 literals need brackets to be followed by a port.
  if (address.find(':') != std::string::npos)
    return "[" + address + "]:" + std::to_string(port);
  return address + ":" + std::to_string(port);
}

namespace {
[[noreturn]] void bad(const std::string &origin, const std::string &what) {
  throw Error(phase::configuration, "", status::invalid_argument, origin + ": " + what);
}
} // namespace

server_database server_database::parse(const std::string &json_text, const std::string &origin) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception &e) {
    bad(origin, std::string("not valid JSON: ") + e.what());
  }
  if (!doc.is_object())
    bad(origin, "expected an object with \"executor_managers\"");
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (it.key() != "executor_managers")
      bad(origin, "unknown key \"" + it.key() + "\" (expected \"executor_managers\")");
  auto list = doc.find("executor_managers");
  if (list == doc.end() || !list->is_array())
    bad(origin, "executor_managers: expected an array");
  std::vector<server> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json &e = (*list)[i];
    std::string where = "executor_managers[" + std::to_string(i) + "]";
    if (!e.is_object())
      bad(origin, where + ": expected an object");
    server s;
    for (auto it = e.begin(); it != e.end(); ++it) {
      const std::string &k = it.key();
      if (k == "name" && it->is_string()) {
        s.name = it->get<std::string>();
      } else if (k == "address" && it->is_string()) {
        s.address = it->get<std::string>();
      } else if (k == "port" && it->is_number_unsigned() && it->get<uint64_t>() <= 65535 &&
                 it->get<uint64_t>() > 0) {
        s.port = static_cast<uint16_t>(it->get<uint64_t>());
      } else if (k == "name" || k == "address") {
        bad(origin, where + "." + k + ": expected a string");
      } else if (k == "port") {
        bad(origin, where + ".port: expected an integer 1..65535");
      } else {
        bad(origin, where + ": unknown key \"" + k + "\" (expected name, address, port)");
      }
    }
    if (s.address.empty())
      bad(origin, where + ".address: missing");
    if (s.port == 0)
      bad(origin, where + ".port: missing");
    if (s.name.empty())
      s.name = s.endpoint();
    out.push_back(std::move(s));
  }
  return server_database(std::move(out));
}

server_database server_database::load(const std::string &path) {
  std::ifstream f(path);
  if (!f)
    bad(path, "cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse(ss.str(), path);
}

const server &server_database::find(const std::string &name) const {
  for (const server &s : servers_)
    if (s.name == name || s.endpoint() == name)
      return s;
  std::string known;
  for (const server &s : servers_)
    known += (known.empty() ? "" : ", ") + s.name;
  throw Error(phase::configuration, "", status::invalid_argument,
              "no executor manager named \"" + name + "\" (known: " + known + ")");
}

const server &server_database::select() {
  if (servers_.empty())
    throw Error(phase::configuration, "", status::invalid_argument,
                "the server database lists no executor manager");
  const server &s = servers_[next_ % servers_.size()];
  ++next_;
  return s;
}

} // namespace rfaas
