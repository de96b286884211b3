#include "resource_manager/rest.hpp"
#include "resource_manager/rest_connections.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <pistache/endpoint.h>
#include <pistache/http.h>
#include <pistache/router.h>
#include <sodium.h>
#include <spdlog/spdlog.h>

namespace rfaas::rm {

using nlohmann::json;
using Pistache::Http::Code;
using Pistache::Http::ResponseWriter;
using Pistache::Rest::Request;

bool bearer_matches(const std::string *header, const std::string &token) {
  static const std::string prefix = "Bearer ";
  if (!header || header->compare(0, prefix.size(), prefix) != 0)
    return false;
  // Hashing both sides first makes the comparison constant-time whatever the
  // lengths, so neither the token's length nor its prefix leaks.
  unsigned char a[crypto_generichash_BYTES], b[crypto_generichash_BYTES];
  std::string given = header->substr(prefix.size());
  crypto_generichash(a, sizeof a, reinterpret_cast<const unsigned char *>(given.data()),
                     given.size(), nullptr, 0);
  crypto_generichash(b, sizeof b, reinterpret_cast<const unsigned char *>(token.data()),
                     token.size(), nullptr, 0);
  return sodium_memcmp(a, b, sizeof a) == 0 && !token.empty();
}

namespace {

Code http_code(Outcome o) {
  switch (o) {
  case Outcome::Ok:
    return Code::Ok;
  case Outcome::Invalid:
    return Code::Bad_Request;
  case Outcome::NotFound:
    return Code::Not_Found;
  case Outcome::Conflict:
    return Code::Conflict;
  case Outcome::Forbidden:
    return Code::Forbidden;
  case Outcome::Unavailable:
    return Code::Service_Unavailable;
  case Outcome::QuotaExceeded:
    return Code::Too_Many_Requests;
  case Outcome::StoreFailed:
    return Code::Internal_Server_Error;
  }
  return Code::Internal_Server_Error;
}

/// A header with a value set by the handler. Pistache 0.0.5 writes only
/// typed headers into an answer (addRaw's are dropped), so each header of our
/// own is a type.
template <class Tag> class TextHeader : public Pistache::Http::Header::Header {
public:
  NAME(Tag::kName)
  TextHeader() = default;
  explicit TextHeader(std::string value) : value_(std::move(value)) {}
  void write(std::ostream &os) const override { os << value_; }

private:
  std::string value_;
};
struct GeneratedMsName {
  static constexpr const char *kName = "X-Rfaas-Generated-Ms";
};
struct NextAfterName {
  static constexpr const char *kName = "X-Rfaas-Next-After";
};
struct WwwAuthenticateName {
  static constexpr const char *kName = "WWW-Authenticate";
};
/// When the snapshot an answer was built from was published
/// (docs/resource_manager.md, "Snapshots").
using GeneratedMs = TextHeader<GeneratedMsName>;
using WwwAuthenticate = TextHeader<WwwAuthenticateName>;
/// A page of GET /nodes or GET /leases that rows follow: what to ask
/// `after` for the next.
using NextAfter = TextHeader<NextAfterName>;

json accounting_json(const std::vector<AccountingRecord> &records) {
  json rows = json::array();
  uint64_t alloc = 0, hot = 0, exec = 0;
  for (const AccountingRecord &r : records) {
    rows.push_back({{"lease", r.lease_id},
                    {"node", r.node},
                    {"client", r.client},
                    {"owner_uid", owner_json(r.owner_uid)},
                    {"job_id", r.job_id},
                    {"reported_ms", r.reported_ms},
                    {"allocation_us", r.allocation_us},
                    {"hot_polling_us", r.hot_polling_us},
                    {"execution_us", r.execution_us},
                    {"memory_mib", r.memory_mib},
                    {"final", r.final},
                    {"owner_uid", owner_json(r.owner_uid)},
                    {"job_id", r.job_id}});
    alloc += r.allocation_us;
    hot += r.hot_polling_us;
    exec += r.execution_us;
  }
  return json{
      {"records", rows},
      {"total", {{"allocation_us", alloc}, {"hot_polling_us", hot}, {"execution_us", exec}}}};
}

/// A text field of the CSV export. Client names come from clients: one that
/// starts like a formula (= + - @, or a tab or carriage return that a
/// spreadsheet skips) would run as one when an operator opens the file, so it
/// gets a leading apostrophe, which spreadsheets show as text. Fields with a
/// comma, a quote or a line break are quoted.
std::string csv_field(const std::string &s) {
  std::string v = s;
  if (!v.empty() && std::string("=+-@\t\r").find(v[0]) != std::string::npos)
    v.insert(v.begin(), '\'');
  if (v.find_first_of(",\"\n\r") == std::string::npos)
    return v;
  std::string q = "\"";
  for (char c : v)
    q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

/// Limits as JSON; unset fields (an override's, inherited) are left out.
json limits_json(const QuotaLimits &l) {
  json j = json::object();
  auto put = [&](const char *key, const std::optional<uint64_t> &v) {
    if (v)
      j[key] = *v;
  };
  put("cores", l.cores);
  put("memory_mib", l.memory_mib);
  put("leases", l.leases);
  put("requests_per_minute", l.requests_per_minute);
  return j;
}

/// A PUT body of limits, or why it is not one.
std::string parse_limits(const json &in, QuotaLimits &out) {
  if (!in.is_object())
    return "expected a JSON object";
  for (auto it = in.begin(); it != in.end(); ++it) {
    std::optional<uint64_t> *field = nullptr;
    if (it.key() == "cores")
      field = &out.cores;
    else if (it.key() == "memory_mib")
      field = &out.memory_mib;
    else if (it.key() == "leases")
      field = &out.leases;
    else if (it.key() == "requests_per_minute")
      field = &out.requests_per_minute;
    else
      return "unknown field \"" + it.key() +
             "\" (valid: cores, memory_mib, leases, requests_per_minute)";
    if (!it->is_number_unsigned())
      return "\"" + it.key() + "\" must be an integer >= 0 (0: no limit)";
    *field = it->get<uint64_t>();
  }
  return {};
}

/// Pistache 0.0.5 hands query values over still percent-encoded.
std::string url_decode(const std::string &s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() &&
               std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::optional<std::string> query(const Request &req, const std::string &name) {
  auto v = req.query().get(name);
  if (v)
    return url_decode(*v);
  return std::nullopt;
}

bool parse_u64(const std::string &s, uint64_t &out) {
  if (s.empty() || s.size() > 20)
    return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    uint64_t next = v * 10 + static_cast<uint64_t>(c - '0');
    if (next / 10 != v)
      return false;
    v = next;
  }
  out = v;
  return true;
}

} // namespace

struct RestServer::Routes {
  RestServer &s;

  void send_json(ResponseWriter &w, Code code, const json &body) {
    w.headers().add<Pistache::Http::Header::ContentType>(MIME(Application, Json));
    send_response(w, code, body.dump() + "\n");
  }
  void send_error(ResponseWriter &w, Code code, const std::string &kind,
                  const std::string &message) {
    send_json(w, code, json{{"error", message}, {"code", kind}});
  }
  void send_status(ResponseWriter &w, const Status &st, Code ok_code, const json &body) {
    if (st.ok())
      send_json(w, ok_code, body);
    else
      send_error(w, http_code(st.outcome), to_string(st.outcome), st.message);
  }
  /// A node that was added or got a new secret, with the secret: shown this
  /// once, for the executor manager's secret file.
  void send_node_with_secret(ResponseWriter &w, const Status &st,
                             const std::optional<NodeView> &view, Code ok_code) {
    json body;
    if (st.ok()) {
      body = node_json(*view);
      body["secret"] = to_hex(view->node.secret);
    }
    send_status(w, st, ok_code, body);
  }

  /// What a request needs: nothing (an open endpoint), the read-only or
  /// the operator token (Read), the operator token (Write).
  enum class Access { Open, Read, Write };

  /// The refusal for a request without the token `need` asks for, or empty.
  std::string refusal(Access need, const std::string *header) const {
    const RestAccess &a = s.access_;
    if (need == Access::Open || bearer_matches(header, a.admin_token))
      return {};
    if (need == Access::Write)
      return "this request changes state: send `Authorization: Bearer <token>` with the "
             "operator token of the resource manager's configuration (http.token)";
    if (!a.read_token.empty() && bearer_matches(header, a.read_token))
      return {};
    return std::string("this request reads nodes, leases or accounting: send `Authorization: "
                       "Bearer <token>` with the operator token (http.token)") +
           (a.read_token.empty() ? "" : " or the read-only token (http.read_token)");
  }

  /// Wraps a handler: timing, authorisation, and errors that must not reach
  /// pistache (a loop shutting down, a bad body).
  Pistache::Rest::Route::Handler wrap(Access need,
                                      std::function<void(const Request &, ResponseWriter &)> f) {
    return [this, need, f = std::move(f)](const Request &req, ResponseWriter w) {
      auto t0 = std::chrono::steady_clock::now();
      try {
        std::string header;
        auto raw = req.headers().tryGetRaw("Authorization");
        if (raw)
          header = raw->value();
        if (std::string why = refusal(need, raw ? &header : nullptr); !why.empty()) {
          w.headers().add<WwwAuthenticate>("Bearer");
          send_error(w, Code::Unauthorized, "unauthorized", why);
        } else {
          f(req, w);
        }
      } catch (const LoopStopped &e) {
        send_error(w, Code::Service_Unavailable, "shutting_down", e.what());
      } catch (const LoopBusy &e) {
        send_error(w, Code::Service_Unavailable, "busy", e.what());
      } catch (const json::exception &e) {
        send_error(w, Code::Bad_Request, "invalid", std::string("bad JSON body: ") + e.what());
      } catch (const std::exception &e) {
        send_error(w, Code::Internal_Server_Error, "internal", e.what());
      }
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      (need == Access::Write ? s.latencies_.http_write : s.latencies_.http_read).observe(dt);
      return Pistache::Rest::Route::Result::Ok;
    };
  }

  void health(const Request &, ResponseWriter &w) {
    json body = s.loop_.call([](Registry &r) {
      return json{{"status", "ok"},
                  {"nodes", r.node_count()},
                  {"active_leases", r.active_count()},
                  {"database", r.store().path()},
                  {"journal_mode", r.store().journal_mode()},
                  {"schema_version", r.store().schema_version()}};
    });
    send_json(w, Code::Ok, body);
  }

  static void add_generated(ResponseWriter &w, uint64_t generated_ms) {
    w.headers().add<GeneratedMs>(std::to_string(generated_ms));
  }

  void metrics(const Request &, ResponseWriter &w) {
    // The loop's published snapshot: a scrape never waits behind a pass of
    // the fabric (with 16 clients leasing over tcp, 12 % of scrapes waited
    // over 10 ms for one), and sees every change a REST answer reported.
    std::shared_ptr<const RegistrySnapshot> snap = s.loop_.published();
    if (!snap)
      snap =
          std::make_shared<RegistrySnapshot>(s.loop_.call([](Registry &r) { return snapshot(r); }));
    w.headers().add<Pistache::Http::Header::ContentType>(
        Pistache::Http::Mime::MediaType::fromString("text/plain; version=0.0.4"));
    add_generated(w, snap->generated_ms);
    send_response(w, Code::Ok, render_metrics(*snap, s.latencies_));
  }

  /// A published table's answer from `read` (a page or one row; `table`
  /// names it in the error). Before the loop's first publication a task
  /// makes it publish (or says why it cannot); generated_ms 0 means nothing
  /// was published yet.
  template <class Read>
  auto read_published(Read read, const char *table, ResponseWriter &w)
      -> std::optional<decltype(read())> {
    auto page = read();
    if (page.generated_ms == 0) {
      s.loop_.call([](Registry &) { return 0; });
      page = read();
      if (page.generated_ms == 0) {
        send_error(w, Code::Service_Unavailable, "busy",
                   std::string("the ") + table + " table is being rebuilt; try again");
        return std::nullopt;
      }
    }
    return page;
  }

  /// A published table's page or row as JSON, dated, with the cursor of
  /// the next page when rows follow.
  template <class Page> void send_page(ResponseWriter &w, const Page &page) {
    w.headers().add<Pistache::Http::Header::ContentType>(MIME(Application, Json));
    add_generated(w, page.generated_ms);
    if (!page.next_after.empty())
      w.headers().add<NextAfter>(page.next_after);
    send_response(w, Code::Ok, *page.body);
  }

  void list_nodes(const Request &req, ResponseWriter &w) {
    // From the table the loop publishes (published_nodes.hpp), not a task:
    // as a task, a GET waited for the fabric pass in progress (p99 13-21 ms
    // while 16 clients leased) and its copy of every node held the loop.
    uint64_t limit = std::numeric_limits<uint64_t>::max();
    if (auto l = query(req, "limit"); l && (!parse_u64(*l, limit) || limit == 0))
      return send_error(w, Code::Bad_Request, "invalid", "limit must be a number >= 1");
    const std::string after = query(req, "after").value_or("");
    auto page = read_published(
        [&] { return s.loop_.published_nodes().page(static_cast<size_t>(limit), after); }, "node",
        w);
    if (page)
      send_page(w, *page);
  }

  void get_node(const Request &req, ResponseWriter &w) {
    const std::string name = req.param(":name").as<std::string>();
    auto page = read_published([&] { return s.loop_.published_nodes().node(name); }, "node", w);
    if (!page)
      return;
    if (!page->body)
      return send_error(w, Code::Not_Found, "not_found", "no node named \"" + name + "\"");
    send_page(w, *page);
  }

  void add_node(const Request &req, ResponseWriter &w) {
    json in = json::parse(req.body());
    if (!in.is_object())
      return send_error(w, Code::Bad_Request, "invalid", "expected a JSON object");
    for (auto it = in.begin(); it != in.end(); ++it)
      if (it.key() != "name" && it.key() != "address" && it.key() != "cores" &&
          it.key() != "memory_mib" && it.key() != "secret")
        return send_error(w, Code::Bad_Request, "invalid",
                          "unknown field \"" + it.key() +
                              "\" (valid: name, address, cores, memory_mib, secret)");
    if (!in.contains("name") || !in.contains("address") || !in.contains("cores") ||
        !in.contains("memory_mib"))
      return send_error(w, Code::Bad_Request, "invalid",
                        "name, address, cores and memory_mib are required");
    std::string name = in.at("name").get<std::string>();
    std::string address = in.at("address").get<std::string>();
    int64_t cores = in.at("cores").get<int64_t>();
    int64_t memory = in.at("memory_mib").get<int64_t>();
    if (cores <= 0 || cores > 4096 || memory <= 0)
      return send_error(w, Code::Bad_Request, "invalid",
                        "cores must be 1..4096 and memory_mib > 0");
    std::optional<NodeSecret> secret;
    if (in.contains("secret")) {
      NodeSecret sec;
      if (!from_hex(in.at("secret").get<std::string>(), sec))
        return send_error(w, Code::Bad_Request, "invalid",
                          "secret must be " + std::to_string(2 * kNodeSecretSize) +
                              " hex digits (or leave it out to have one generated)");
      secret = sec;
    }
    auto [st, view] = s.loop_.call([&](Registry &r) {
      auto res = r.add_node(name, address, static_cast<uint32_t>(cores),
                            static_cast<uint64_t>(memory), secret);
      std::optional<NodeView> v;
      if (res.ok())
        v = r.node(name);
      return std::make_pair(Status{res.outcome, res.message}, v);
    });
    send_node_with_secret(w, st, view, Code::Created);
  }

  void drain_node(const Request &req, ResponseWriter &w) {
    std::string name = req.param(":name").as<std::string>();
    bool drained = true;
    if (!req.body().empty()) {
      json in = json::parse(req.body());
      for (auto it = in.begin(); it != in.end(); ++it)
        if (it.key() != "drained")
          return send_error(w, Code::Bad_Request, "invalid",
                            "unknown field \"" + it.key() + "\" (valid: drained)");
      if (in.contains("drained"))
        drained = in.at("drained").get<bool>();
    }
    auto [st, view] = s.loop_.call([&](Registry &r) {
      Status st = r.drain(name, drained);
      return std::make_pair(st, st.ok() ? r.node(name) : std::nullopt);
    });
    send_status(w, st, Code::Ok, st.ok() ? node_json(*view) : json());
  }

  void rotate_secret(const Request &req, ResponseWriter &w) {
    std::string name = req.param(":name").as<std::string>();
    std::optional<NodeSecret> secret;
    if (!req.body().empty()) {
      json in = json::parse(req.body());
      if (!in.is_object())
        return send_error(w, Code::Bad_Request, "invalid", "expected a JSON object");
      for (auto it = in.begin(); it != in.end(); ++it)
        if (it.key() != "secret")
          return send_error(w, Code::Bad_Request, "invalid",
                            "unknown field \"" + it.key() + "\" (valid: secret)");
      if (in.contains("secret")) {
        NodeSecret sec;
        if (!from_hex(in.at("secret").get<std::string>(), sec))
          return send_error(w, Code::Bad_Request, "invalid",
                            "secret must be " + std::to_string(2 * kNodeSecretSize) +
                                " hex digits (or leave it out to have one generated)");
        secret = sec;
      }
    }
    auto [st, view] = s.loop_.call([&](Registry &r) {
      auto res = r.rotate_secret(name, secret);
      std::optional<NodeView> v;
      if (res.ok())
        v = r.node(name);
      return std::make_pair(Status{res.outcome, res.message}, v);
    });
    send_node_with_secret(w, st, view, Code::Ok);
  }

  void remove_node(const Request &req, ResponseWriter &w) {
    std::string name = req.param(":name").as<std::string>();
    auto force = query(req, "force");
    bool revoke = force && (*force == "true" || *force == "1");
    Status st = s.loop_.call([&](Registry &r) { return r.remove_node(name, revoke); });
    send_status(w, st, Code::Ok, json{{"removed", name}});
  }

  void list_leases(const Request &req, ResponseWriter &w) {
    auto state = query(req, "state");
    std::optional<LeaseState> filter = LeaseState::Active;
    if (state && *state == "all")
      filter = std::nullopt;
    else if (state) {
      LeaseState ls;
      if (!parse_lease_state(*state, ls))
        return send_error(w, Code::Bad_Request, "invalid",
                          "state must be active, released, expired, revoked, node_down or all");
      filter = ls;
    }
    uint64_t limit = 1000;
    if (auto l = query(req, "limit"); l && !parse_u64(*l, limit))
      return send_error(w, Code::Bad_Request, "invalid", "limit must be a number");
    const std::string after = query(req, "after").value_or("");
    if (filter == LeaseState::Active) {
      // What an operator polls: from the table the loop publishes, as /nodes.
      auto page =
          read_published([&] { return s.loop_.published_leases().page(limit, after); }, "lease", w);
      if (page)
        send_page(w, *page);
      return;
    }
    if (!after.empty())
      return send_error(w, Code::Bad_Request, "invalid",
                        "after pages the active leases only; ended ones come by ?limit=");
    // Ended leases are in the database only: the loop reads them, this
    // thread builds the JSON.
    std::vector<Lease> leases =
        s.loop_.call([&](Registry &r) { return r.store().load_leases(filter, limit); });
    json body = json::array();
    for (const Lease &l : leases)
      if (body.size() < limit)
        body.push_back(lease_json(l));
    send_json(w, Code::Ok, body);
  }

  void revoke_lease(const Request &req, ResponseWriter &w) {
    uint64_t id;
    if (!parse_u64(req.param(":id").as<std::string>(), id))
      return send_error(w, Code::Bad_Request, "invalid", "lease id must be a decimal number");
    Status st = s.loop_.call([&](Registry &r) { return r.revoke(id); });
    send_status(w, st, Code::Ok, json{{"revoked", id}});
  }

  /// The slurm node provider's pilot jobs (an empty list with static
  /// nodes): those that live, and the last 100 that ended, with why.
  void list_pilots(const Request &, ResponseWriter &w) {
    json body = s.loop_.call([&](Registry &r) {
      json a = json::array();
      for (const PilotRecord &p : r.store().load_pilots(100))
        a.push_back(json{{"id", p.id},
                         {"job_id", p.job_id},
                         {"state", p.state},
                         {"submitted_ms", p.submitted_ms},
                         {"ended_ms", p.ended_ms},
                         {"reason", p.reason},
                         {"nodes", p.nodes}});
      return a;
    });
    send_json(w, Code::Ok, body);
  }

  /// Records selected by ?lease= or ?client= (all without either).
  bool select_accounting(const Request &req, ResponseWriter &w,
                         std::vector<AccountingRecord> &out) {
    auto lease = query(req, "lease");
    auto client = query(req, "client");
    if (lease && client) {
      send_error(w, Code::Bad_Request, "invalid", "give lease= or client=, not both");
      return false;
    }
    uint64_t id = 0;
    if (lease && !parse_u64(*lease, id)) {
      send_error(w, Code::Bad_Request, "invalid", "lease must be a decimal lease id");
      return false;
    }
    out = s.loop_.call([&](Registry &r) {
      if (lease)
        return r.store().accounting_for_lease(id);
      if (client)
        return r.store().accounting_for_client(*client);
      return r.store().all_accounting();
    });
    return true;
  }

  void accounting(const Request &req, ResponseWriter &w) {
    std::vector<AccountingRecord> rows;
    if (select_accounting(req, w, rows))
      send_json(w, Code::Ok, accounting_json(rows));
  }

  void accounting_csv(const Request &req, ResponseWriter &w) {
    std::vector<AccountingRecord> rows;
    if (!select_accounting(req, w, rows))
      return;
    std::string csv = "lease,node,client,reported_ms,allocation_us,hot_polling_us,execution_us,"
                      "memory_mib,final,owner_uid,job_id\n";
    for (const AccountingRecord &r : rows)
      csv += std::to_string(r.lease_id) + "," + csv_field(r.node) + "," + csv_field(r.client) +
             "," + std::to_string(r.reported_ms) + "," + std::to_string(r.allocation_us) + "," +
             std::to_string(r.hot_polling_us) + "," + std::to_string(r.execution_us) + "," +
             std::to_string(r.memory_mib) + "," + (r.final ? "1" : "0") + "," +
             (r.owner_uid == kAnonymousOwner ? "" : std::to_string(r.owner_uid)) + "," +
             csv_field(r.job_id) + "\n";
    w.headers().add<Pistache::Http::Header::ContentType>(
        Pistache::Http::Mime::MediaType::fromString("text/csv"));
    send_response(w, Code::Ok, csv);
  }
};

// ---- quotas ------------------------------------------------------------------------

namespace {

/// One user's quota as GET /quotas/users/{user} shows it.
json user_quota_json(Registry &r, const std::string &key) {
  const QuotaUser user = QuotaUser::from_key(key);
  QuotaSource source;
  const QuotaLimits limits = r.quotas().effective(user, &source);
  const QuotaUsage usage = r.quota_usage(user);
  return json{{"user", user.key()},
              {"who", user.describe()},
              {"source", to_string(source)},
              {"limits", limits_json(limits)},
              {"usage",
               {{"cores", usage.cores},
                {"memory_mib", usage.memory_mib},
                {"leases", usage.leases},
                {"requests_last_minute", r.quotas().recent_requests(user, r.now())}}}};
}

json all_quotas_json(Registry &r) {
  const Quotas &q = r.quotas();
  json users = json::array();
  std::set<std::string> keys;
  for (const auto &kv : q.config().users)
    keys.insert(kv.first);
  for (const auto &kv : q.rest_users())
    keys.insert(kv.first);
  for (const std::string &k : keys)
    users.push_back(user_quota_json(r, k));
  return json{{"default", limits_json(q.default_limits())},
              {"default_source", q.rest_default() ? "rest" : "config"},
              {"users", users}};
}

} // namespace

struct RestServer::QuotaRoutes {
  RestServer &s;
  Routes &base;

  std::string user_key(const Request &req) {
    std::string key = url_decode(req.param(":user").as<std::string>());
    return QuotaUser::from_key(key).key();
  }

  void list(const Request &, ResponseWriter &w) {
    base.send_json(w, Code::Ok, s.loop_.call([](Registry &r) { return all_quotas_json(r); }));
  }

  void get_user(const Request &req, ResponseWriter &w) {
    const std::string key = user_key(req);
    if (key.empty() || key.size() > 255)
      return base.send_error(w, Code::Bad_Request, "invalid", "a user is 1..255 characters");
    base.send_json(w, Code::Ok, s.loop_.call([&](Registry &r) { return user_quota_json(r, key); }));
  }

  /// PUT of the default (`key` empty) or of a user's override.
  void put(const Request &req, ResponseWriter &w, const std::string &key) {
    QuotaLimits limits;
    if (std::string why = parse_limits(json::parse(req.body()), limits); !why.empty())
      return base.send_error(w, Code::Bad_Request, "invalid", why);
    auto [st, body] = s.loop_.call([&](Registry &r) {
      Status st = r.set_quota(key, limits);
      return std::make_pair(
          st, st.ok() ? (key.empty() ? all_quotas_json(r) : user_quota_json(r, key)) : json());
    });
    base.send_status(w, st, Code::Ok, body);
  }
  void put_default(const Request &req, ResponseWriter &w) { put(req, w, ""); }
  void put_user(const Request &req, ResponseWriter &w) {
    const std::string key = user_key(req);
    if (key.empty() || key.size() > 255)
      return base.send_error(w, Code::Bad_Request, "invalid", "a user is 1..255 characters");
    put(req, w, key);
  }

  void remove(ResponseWriter &w, const std::string &key) {
    auto [st, body] = s.loop_.call([&](Registry &r) {
      Status st = r.remove_quota(key);
      return std::make_pair(
          st, st.ok() ? (key.empty() ? all_quotas_json(r) : user_quota_json(r, key)) : json());
    });
    base.send_status(w, st, Code::Ok, body);
  }
  void remove_default(const Request &, ResponseWriter &w) { remove(w, ""); }
  void remove_user(const Request &req, ResponseWriter &w) { remove(w, user_key(req)); }
};

RestServer::RestServer(Loop &loop, RestAccess access) : loop_(loop), access_(std::move(access)) {
  ensure_sodium();
}

RestServer::~RestServer() { stop(); }

void RestServer::start(const std::string &host, uint16_t port, uint32_t threads,
                       const RestConnectionLimits &limits) {
  using namespace Pistache;
  auto routes = std::make_shared<Routes>(Routes{*this});
  auto router = std::make_shared<Rest::Router>();
  auto bind = [&](void (Routes::*m)(const Request &, ResponseWriter &)) {
    return [routes, m](const Request &q, ResponseWriter &w) { ((*routes).*m)(q, w); };
  };
  using A = Routes::Access;
  const A health = access_.open_health ? A::Open : A::Read;
  const A metrics = access_.open_metrics ? A::Open : A::Read;
  Rest::Routes::Get(*router, "/health", routes->wrap(health, bind(&Routes::health)));
  Rest::Routes::Get(*router, "/metrics", routes->wrap(metrics, bind(&Routes::metrics)));
  Rest::Routes::Get(*router, "/nodes", routes->wrap(A::Read, bind(&Routes::list_nodes)));
  Rest::Routes::Post(*router, "/nodes", routes->wrap(A::Write, bind(&Routes::add_node)));
  Rest::Routes::Get(*router, "/nodes/:name", routes->wrap(A::Read, bind(&Routes::get_node)));
  Rest::Routes::Post(*router, "/nodes/:name/drain",
                     routes->wrap(A::Write, bind(&Routes::drain_node)));
  Rest::Routes::Delete(*router, "/nodes/:name", routes->wrap(A::Write, bind(&Routes::remove_node)));
  Rest::Routes::Post(*router, "/nodes/:name/secret",
                     routes->wrap(A::Write, bind(&Routes::rotate_secret)));
  Rest::Routes::Get(*router, "/leases", routes->wrap(A::Read, bind(&Routes::list_leases)));
  Rest::Routes::Delete(*router, "/leases/:id", routes->wrap(A::Write, bind(&Routes::revoke_lease)));
  Rest::Routes::Get(*router, "/pilots", routes->wrap(A::Read, bind(&Routes::list_pilots)));
  Rest::Routes::Get(*router, "/accounting", routes->wrap(A::Read, bind(&Routes::accounting)));
  auto quotas = std::make_shared<QuotaRoutes>(QuotaRoutes{*this, *routes});
  auto qbind = [&](void (QuotaRoutes::*m)(const Request &, ResponseWriter &)) {
    return [routes, quotas, m](const Request &q, ResponseWriter &w) { ((*quotas).*m)(q, w); };
  };
  Rest::Routes::Get(*router, "/quotas", routes->wrap(A::Read, qbind(&QuotaRoutes::list)));
  Rest::Routes::Put(*router, "/quotas/default",
                    routes->wrap(A::Write, qbind(&QuotaRoutes::put_default)));
  Rest::Routes::Delete(*router, "/quotas/default",
                       routes->wrap(A::Write, qbind(&QuotaRoutes::remove_default)));
  Rest::Routes::Get(*router, "/quotas/users/:user",
                    routes->wrap(A::Read, qbind(&QuotaRoutes::get_user)));
  Rest::Routes::Put(*router, "/quotas/users/:user",
                    routes->wrap(A::Write, qbind(&QuotaRoutes::put_user)));
  Rest::Routes::Delete(*router, "/quotas/users/:user",
                       routes->wrap(A::Write, qbind(&QuotaRoutes::remove_user)));
  Rest::Routes::Get(*router, "/accounting.csv",
                    routes->wrap(A::Read, bind(&Routes::accounting_csv)));
  // pistache's own 404 is plain text and would skip send_response (which
  // closes the connections that asked for it).
  Rest::Routes::NotFound(
      *router, routes->wrap(A::Open, [routes](const Request &req, ResponseWriter &w) {
        routes->send_error(w, Code::Not_Found, "not_found",
                           std::string("no such endpoint: ") +
                               Pistache::Http::methodString(req.method()) + " " + req.resource() +
                               " (docs/resource_manager.md lists them)");
      }));

  try {
    endpoint_ = std::make_shared<Http::Endpoint>(Address(host, Port(port)));
    // One idle timeout for every silence: between requests (keep-alive),
    // before the first header and inside a body.
    endpoint_->init(Http::Endpoint::options()
                        .threads(static_cast<int>(threads))
                        .flags(Tcp::Options::ReuseAddr | Tcp::Options::NoDelay)
                        .maxRequestSize(64 * 1024)
                        .keepaliveTimeout(limits.idle_timeout)
                        .headerTimeout(limits.idle_timeout)
                        .bodyTimeout(limits.idle_timeout));
    connections_ = std::make_shared<ConnectionCount>(limits.max_connections);
    endpoint_->setHandler(std::make_shared<ConnectionGate>(router, connections_));
    endpoint_->serveThreaded();
  } catch (const std::exception &e) {
    endpoint_.reset();
    throw std::runtime_error("REST API: cannot listen on " + host + ":" + std::to_string(port) +
                             ": " + e.what() + " (change http.host / http.port)");
  }
  port_ = static_cast<uint16_t>(endpoint_->getPort());
  // The router must outlive the endpoint's threads; keep it with the routes.
  router_keepalive_ = router;
}

uint32_t RestServer::open_connections() const {
  return connections_ ? connections_->open.load() : 0;
}

uint64_t RestServer::refused_connections() const {
  return connections_ ? connections_->refused.load() : 0;
}

void RestServer::stop() {
  if (endpoint_) {
    endpoint_->shutdown();
    endpoint_.reset();
  }
}

} // namespace rfaas::rm
