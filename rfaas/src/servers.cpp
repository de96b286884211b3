#include <rfaas/errors.hpp>
#include <rfaas/servers.hpp>

#include <nlohmann/json.hpp>

#include <rdmalib/address.hpp>
#include <rdmalib/config_node.hpp>
#include <rdmalib/errors.hpp>

namespace rfaas {

std::string server::endpoint() const {
  // rdmalib prints addresses (brackets around IPv6 literals, opaque names as
  // they are); a malformed opaque name is printed as it was given.
  try {
    return rdmalib::Address::from_host_text(address, port).to_string();
  } catch (const rdmalib::Error &) {
    return address;
  }
}

server server::parse(const std::string &text) {
  try {
    rdmalib::Address a = rdmalib::Address::parse(text);
    server s;
    s.name = text;
    s.address = a.host_text();
    s.port = a.port;
    return s;
  } catch (const rdmalib::Error &e) {
    throw Error(phase::configuration, text, status::invalid_argument, e.what());
  }
}

server_database server_database::parse(const std::string &json_text, const std::string &origin) {
  try {
    nlohmann::json doc = rdmalib::ConfigNode::parse(json_text, origin);
    rdmalib::ConfigNode root(doc, origin);
    root.expect_object({"executor_managers"});
    rdmalib::ConfigNode list =
        root.required("executor_managers", "an array of {\"name\", \"address\", \"port\"} entries");
    size_t n = list.expect_array();
    std::vector<server> out;
    for (size_t i = 0; i < n; ++i) {
      rdmalib::ConfigNode e = list[i];
      e.expect_object({"name", "address", "port"});
      server s;
      e.optional("name", s.name);
      rdmalib::ConfigNode address = e.required(
          "address", "a host name or IP address of the manager's listener, or the ofi: name it "
                     "printed");
      s.address = address.nonempty_string();
      if (rdmalib::Address::opaque_text(s.address)) {
        // An ofi: name is the whole endpoint: a "port" beside it may only be 0.
        e.optional("port", s.port, 0, 0);
      } else {
        s.port = static_cast<uint16_t>(
            e.required("port", "the manager's listening port, 1..65535").integer(1, 65535));
      }
      // Checked here, so that a typo is reported with the file's name and the
      // entry, not at the first connection: the address must be one that
      // rfaas::server::parse reads back from endpoint().
      try {
        const rdmalib::Address a = rdmalib::Address::parse(s.endpoint());
        // An opaque name is kept as rdmalib spells it (lower-case hex), as
        // managers print it and server::parse gives it back: "ofi:efa:FE80"
        // and "ofi:efa:fe80" are one manager.
        if (a.opaque())
          s.address = a.host_text();
      } catch (const rdmalib::Error &bad) {
        address.fail(bad.what());
      }
      if (s.name.empty())
        s.name = s.endpoint();
      out.push_back(std::move(s));
    }
    return server_database(std::move(out));
  } catch (const rdmalib::Error &e) {
    throw Error(phase::configuration, "", status::invalid_argument, e.what());
  }
}

server_database server_database::load(const std::string &path) {
  try {
    return parse(rdmalib::ConfigNode::read_file(path, "server database"), path);
  } catch (const rdmalib::Error &e) {
    throw Error(phase::configuration, "", status::invalid_argument, e.what());
  }
}

const server &server_database::find(const std::string &name) const {
  // An opaque name may be asked for in either case of its hex digits.
  std::string endpoint = name;
  if (rdmalib::Address::opaque_text(name)) {
    try {
      endpoint = rdmalib::Address::parse(name).to_string();
    } catch (const rdmalib::Error &) {
    }
  }
  // A name first: an unnamed entry is named by its endpoint, and an earlier
  // entry for the same endpoint must not answer for it.
  for (const server &s : servers_)
    if (s.name == name)
      return s;
  for (const server &s : servers_)
    if (s.endpoint() == endpoint)
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
