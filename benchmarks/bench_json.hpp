// The JSON document every benchmark writes with --json FILE, beside its CSV:
// what was measured (rows, latency CDFs) together with where and how (commit,
// host, backend, provider, library version, date, parameters), so that a
// figure read months later, or plotted by benchmarks/plot.py, still says what
// produced it. Header-only and free of any network library: the raw libfabric
// baselines use it as well as the programs linking librfaas.
//
// Shape (docs for readers of the files; plot.py relies on it):
//   { "schema": "rfaas-benchmark/1",
//     "benchmark": "<program>",
//     "metadata": { "git_commit", "host", "date_utc", "rfaas_version", "backend",
//                   "backend_version", "provider", "endpoint", "cpus", "loadavg_1m",
//                   "command_line" },
//     "parameters": { ... the program's options ... },
//     "results": [ { "kind": "latency", "size": 8, "median_us": ..., "cdf": {"q": [...],
//                    "us": [...]} }, { "kind": "rate", ... }, ... ] }
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <sys/sysinfo.h>
#include <unistd.h>

// Generated at build time (benchmarks/git_commit.cmake).
#if __has_include("bench_git_commit.h")
#include "bench_git_commit.h"
#include "stats.hpp"
#endif
#ifndef RFAAS_GIT_COMMIT
#define RFAAS_GIT_COMMIT "unknown"
#endif
#ifndef RFAAS_VERSION
#define RFAAS_VERSION "unknown"
#endif

namespace bench_json {

/// A JSON value: enough to build a benchmark's document and print it.
/// Objects keep their keys in insertion order (readers see metadata first).
class Value {
public:
  Value() = default; // null
  Value(bool b) : kind_(Kind::Bool), b_(b) {}
  Value(double d) : kind_(Kind::Number), d_(d) {}
  Value(int v) : Value(static_cast<double>(v)) {}
  Value(unsigned v) : Value(static_cast<double>(v)) {}
  Value(long v) : Value(static_cast<double>(v)) {}
  Value(unsigned long v) : Value(static_cast<double>(v)) {}
  Value(long long v) : Value(static_cast<double>(v)) {}
  Value(unsigned long long v) : Value(static_cast<double>(v)) {}
  Value(const char *s) : kind_(Kind::String), s_(s) {}
  Value(std::string s) : kind_(Kind::String), s_(std::move(s)) {}
  Value(const std::vector<double> &v) : kind_(Kind::Array) {
    for (double d : v)
      a_.emplace_back(d);
  }

  static Value object() {
    Value v;
    v.kind_ = Kind::Object;
    return v;
  }
  static Value array() {
    Value v;
    v.kind_ = Kind::Array;
    return v;
  }

  /// Object member (added at the end the first time).
  Value &operator[](const std::string &key) {
    if (kind_ == Kind::Null)
      kind_ = Kind::Object;
    if (kind_ != Kind::Object)
      throw std::logic_error("bench_json: [\"" + key + "\"] on a value that is not an object");
    for (auto &kv : o_)
      if (kv.first == key)
        return kv.second;
    o_.emplace_back(key, Value());
    return o_.back().second;
  }
  /// Array element appended.
  Value &push(Value v) {
    if (kind_ == Kind::Null)
      kind_ = Kind::Array;
    if (kind_ != Kind::Array)
      throw std::logic_error("bench_json: push on a value that is not an array");
    a_.push_back(std::move(v));
    return a_.back();
  }

  std::string dump(int indent = 0) const {
    std::string out;
    write(out, indent, 0);
    return out;
  }

private:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  static void escape(std::string &out, const std::string &s) {
    out += '"';
    for (unsigned char c : s) {
      switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
      }
    }
    out += '"';
  }

  static void newline(std::string &out, int indent, int depth) {
    if (indent <= 0)
      return;
    out += '\n';
    out.append(static_cast<size_t>(indent * depth), ' ');
  }

  void write(std::string &out, int indent, int depth) const {
    switch (kind_) {
    case Kind::Null:
      out += "null";
      return;
    case Kind::Bool:
      out += b_ ? "true" : "false";
      return;
    case Kind::Number: {
      // JSON has no NaN or infinity: a missing figure is null.
      if (!std::isfinite(d_)) {
        out += "null";
        return;
      }
      char buf[32];
      if (d_ == std::floor(d_) && std::fabs(d_) < 9e15)
        std::snprintf(buf, sizeof buf, "%.0f", d_);
      else
        std::snprintf(buf, sizeof buf, "%.6g", d_);
      out += buf;
      return;
    }
    case Kind::String:
      escape(out, s_);
      return;
    case Kind::Array: {
      out += '[';
      // Arrays of numbers stay on one line: CDFs would otherwise take pages.
      bool flat = std::all_of(a_.begin(), a_.end(), [](const Value &v) {
        return v.kind_ != Kind::Array && v.kind_ != Kind::Object;
      });
      for (size_t i = 0; i < a_.size(); ++i) {
        if (i)
          out += flat ? ", " : ",";
        if (!flat)
          newline(out, indent, depth + 1);
        a_[i].write(out, indent, depth + 1);
      }
      if (!flat && !a_.empty())
        newline(out, indent, depth);
      out += ']';
      return;
    }
    case Kind::Object:
      out += '{';
      for (size_t i = 0; i < o_.size(); ++i) {
        if (i)
          out += ',';
        newline(out, indent, depth + 1);
        escape(out, o_[i].first);
        out += indent > 0 ? ": " : ":";
        o_[i].second.write(out, indent, depth + 1);
      }
      if (!o_.empty())
        newline(out, indent, depth);
      out += '}';
      return;
    }
  }

  Kind kind_ = Kind::Null;
  bool b_ = false;
  double d_ = 0;
  std::string s_;
  std::vector<Value> a_;
  std::vector<std::pair<std::string, Value>> o_;
};

/// The latency distribution as quantiles of `sorted` (ascending): every
/// percentile, then 99.5, 99.9 and the maximum, enough to draw a CDF without
/// storing every sample.
inline Value cdf(const std::vector<double> &sorted) {
  Value q = Value::array(), us = Value::array();
  if (!sorted.empty()) {
    std::vector<double> qs;
    for (int i = 0; i < 100; ++i)
      qs.push_back(i / 100.0);
    qs.insert(qs.end(), {0.995, 0.999, 1.0});
    for (double p : qs) {
      q.push(p);
      us.push(bench_stats::percentile_sorted(sorted, p));
    }
  }
  Value v = Value::object();
  v["q"] = std::move(q);
  v["us"] = std::move(us);
  return v;
}

/// What identifies a run besides the program's own parameters.
struct RunIdentity {
  std::string benchmark;       // program name
  std::string backend;         // "libfabric" or "verbs"
  std::string backend_version; // e.g. "1.17"
  std::string provider;        // provider actually opened ("" when none)
  std::string endpoint;        // "msg", "rdm", "connected", ...
  std::vector<std::string> argv;
};

inline std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

inline std::vector<std::string> args_of(int argc, char **argv) {
  return std::vector<std::string>(argv, argv + argc);
}

/// The document's skeleton: schema, benchmark, metadata; the caller fills
/// "parameters" and pushes onto "results".
inline Value document(const RunIdentity &id) {
  Value doc = Value::object();
  doc["schema"] = "rfaas-benchmark/1";
  doc["benchmark"] = id.benchmark;
  Value &m = doc["metadata"];
  m["git_commit"] = RFAAS_GIT_COMMIT;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0)
    host[0] = '\0';
  m["host"] = std::string(host);
  m["date_utc"] = utc_now();
  m["rfaas_version"] = RFAAS_VERSION;
  m["backend"] = id.backend;
  m["backend_version"] = id.backend_version;
  m["provider"] = id.provider;
  m["endpoint"] = id.endpoint;
  m["cpus"] = static_cast<long>(::sysconf(_SC_NPROCESSORS_ONLN));
  // The shared machines these run on are rarely idle: the load at the start
  // says how much a figure may have suffered from it.
  double load[1] = {0};
  if (::getloadavg(load, 1) == 1)
    m["loadavg_1m"] = load[0];
  Value cmd = Value::array();
  for (const auto &a : id.argv)
    cmd.push(a);
  m["command_line"] = std::move(cmd);
  doc["parameters"] = Value::object();
  doc["results"] = Value::array();
  return doc;
}

/// Write `doc` to `path` (replacing it). Throws std::runtime_error naming the
/// file when it cannot be written.
inline void write(const std::string &path, const Value &doc) {
  std::ofstream out(path, std::ios::trunc);
  if (!out)
    throw std::runtime_error("cannot open " + path + " for writing");
  out << doc.dump(1) << '\n';
  out.flush();
  if (!out)
    throw std::runtime_error("writing " + path + " failed");
}

} // namespace bench_json
