#include <rdmalib/config_node.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

namespace rdmalib {

ConfigNode::ConfigNode(const nlohmann::json &root, std::string origin)
    : value_(&root), origin_(std::move(origin)) {}

namespace {

// The JSON paths and the one-line message of every configuration error,
// written once for ConfigNode and the parser callback below.
std::string member_path(const std::string &parent, const std::string &key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string element_path(const std::string &parent, size_t i) {
  return parent + "[" + std::to_string(i) + "]";
}

Error config_error(const std::string &origin, const std::string &path, const std::string &what) {
  return Error(ErrorKind::Config, origin + ": " + path + ": " + what);
}

/// Where the parser is, for naming a duplicate key the way ConfigNode names
/// values ("devices[1].port"): one frame per open object or array.
class KeyTracker {
public:
  explicit KeyTracker(const std::string &origin) : origin_(origin) {}

  /// nlohmann's parser callback. JSON allows a key twice in one object and
  /// nlohmann keeps the last value, so `{"port": 1, "port": 2}` would read as
  /// port 2 without a word: a strict reader refuses it instead.
  bool operator()(int, nlohmann::json::parse_event_t event, nlohmann::json &parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
    case E::object_start:
    case E::array_start:
      count_element();
      frames_.push_back(Frame{event == E::object_start, {}, {}, 0});
      break;
    case E::object_end:
    case E::array_end:
      if (!frames_.empty())
        frames_.pop_back();
      break;
    case E::key: {
      Frame &f = frames_.back();
      f.key = parsed.get<std::string>();
      if (!f.keys.insert(f.key).second)
        throw config_error(origin_, path(),
                           "duplicate key; a key may appear once in an object (the later value "
                           "would silently replace the earlier)");
      break;
    }
    case E::value:
      count_element();
      break;
    }
    return true;
  }

private:
  struct Frame {
    bool object;
    std::set<std::string> keys; // objects: the keys seen so far
    std::string key;            // objects: the key being read
    size_t count;               // arrays: elements begun so far
  };

  void count_element() {
    if (!frames_.empty() && !frames_.back().object)
      ++frames_.back().count;
  }

  std::string path() const {
    std::string p;
    for (const Frame &f : frames_)
      p = f.object ? member_path(p, f.key) : element_path(p, f.count - 1);
    return p;
  }

  const std::string &origin_;
  std::vector<Frame> frames_;
};

} // namespace

nlohmann::json ConfigNode::parse(const std::string &text, const std::string &origin) {
  try {
    return nlohmann::json::parse(text, KeyTracker(origin));
  } catch (const nlohmann::json::parse_error &e) {
    // e.what() says "parse error at line 3, column 5"; the byte offset is
    // what editors jump to.
    throw Error(ErrorKind::Config,
                origin + ": malformed JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const nlohmann::json::exception &e) {
    // Not a syntax error but still the parser's: a number too large for a
    // double is out_of_range.406 (found by fuzzing).
    throw Error(ErrorKind::Config, origin + ": unreadable JSON: " + e.what());
  }
}

std::string ConfigNode::read_file(const std::string &path, const std::string &hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    throw Error(ErrorKind::Config,
                path + ": cannot open " + hint + ": " + std::strerror(err ? err : ENOENT));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw Error(ErrorKind::Config, path + ": cannot read " + hint);
  return text.str();
}

std::string ConfigNode::path() const { return path_.empty() ? "(top level)" : path_; }

void ConfigNode::fail(const std::string &what) const { throw config_error(origin_, path(), what); }

std::string ConfigNode::shown() const {
  std::string s = value_->dump();
  if (s.size() > 60)
    s = s.substr(0, 57) + "...";
  return std::string(value_->type_name()) + " " + s;
}

void ConfigNode::expect_object(std::initializer_list<const char *> keys) const {
  if (!value_->is_object())
    fail("expected an object, got " + shown());
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    bool known = false;
    for (const char *k : keys)
      known = known || it.key() == k;
    if (known)
      continue;
    std::string list;
    for (const char *k : keys)
      list += (list.empty() ? "" : ", ") + std::string(k);
    ConfigNode(&it.value(), origin_, member_path(path_, it.key()))
        .fail("unknown key; valid keys here: " + list);
  }
}

bool ConfigNode::has(const char *key) const {
  return value_->is_object() && value_->find(key) != value_->end();
}

ConfigNode ConfigNode::operator[](const char *key) const {
  std::string child = member_path(path_, key);
  auto it = value_->find(key);
  if (it == value_->end())
    ConfigNode(value_, origin_, child).fail("missing required key");
  return ConfigNode(&*it, origin_, child);
}

ConfigNode ConfigNode::required(const char *key, const std::string &expected) const {
  if (!has(key))
    ConfigNode(value_, origin_, member_path(path_, key))
        .fail("missing required key; expected " + expected);
  return (*this)[key];
}

size_t ConfigNode::expect_array() const {
  if (!value_->is_array())
    fail("expected an array, got " + shown());
  return value_->size();
}

ConfigNode ConfigNode::operator[](size_t i) const {
  return ConfigNode(&(*value_)[i], origin_, element_path(path_, i));
}

std::string ConfigNode::typed_string(const char *expected) const {
  if (!value_->is_string())
    fail(std::string(expected) + ", got " + shown());
  return value_->get<std::string>();
}

std::string ConfigNode::string() const { return typed_string("expected a string"); }

std::string ConfigNode::nonempty_string() const {
  std::string s = typed_string("expected a non-empty string");
  if (s.empty())
    fail("expected a non-empty string, got an empty one");
  return s;
}

bool ConfigNode::boolean() const {
  if (!value_->is_boolean())
    fail("expected true or false, got " + shown());
  return value_->get<bool>();
}

uint64_t ConfigNode::integer(uint64_t min, uint64_t max) const {
  // Negative numbers are number_integer but not number_unsigned; floats are
  // neither: both are refused with the same message.
  if (!value_->is_number_unsigned() || value_->get<uint64_t>() < min ||
      value_->get<uint64_t>() > max)
    fail("expected an integer " + std::to_string(min) + ".." + std::to_string(max) + ", got " +
         shown());
  return value_->get<uint64_t>();
}

void ConfigNode::optional(const char *key, std::string &out) const {
  if (has(key))
    out = (*this)[key].string();
}

void ConfigNode::optional(const char *key, bool &out) const {
  if (has(key))
    out = (*this)[key].boolean();
}

} // namespace rdmalib
