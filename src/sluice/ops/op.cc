#include "sluice/ops/op.h"

#include <charconv>
#include <cmath>
#include <system_error>

#include "absl/strings/str_join.h"

namespace sluice::ops {
namespace {

// The shortest decimal spelling that reads back as the same double (locale-independent),
// always with a '.' or an exponent so that it still reads as a float ("1.0", not "1").
std::string FormatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, ec == std::errc() ? end : buf);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

// What a value of `arg`'s type looks like, for "expected ..." messages.
std::string Expected(const ArgSchema& arg) {
  switch (arg.type) {
    case ArgType::kInt:
      return "an int";
    case ArgType::kFloat:
      return "a float";
    case ArgType::kBool:
      return "a bool (true or false)";
    case ArgType::kString:
      return "a string";
    case ArgType::kIntList:
    case ArgType::kFloatList: {
      const char* unit = arg.type == ArgType::kIntList ? "int" : "float";
      if (arg.list_length > 0) {
        return absl::StrCat(arg.list_length, " ", unit, arg.list_length == 1 ? "" : "s");
      }
      return absl::StrCat("a non-empty list of ", unit, "s");
    }
  }
  return "?";
}

Status TypeError(const ArgSchema& arg, const ArgValue& got) {
  std::string what = ArgValueToString(got);
  if (arg.list_length > 0) {
    if (const auto* v = std::get_if<std::vector<int64_t>>(&got)) {
      what = absl::StrCat(v->size(), " (", what, ")");
    } else if (const auto* d = std::get_if<std::vector<double>>(&got)) {
      what = absl::StrCat(d->size(), " (", what, ")");
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(arg.name, ": expected ", Expected(arg), ", got ", what));
}

bool IsIntegral(double v) { return std::isfinite(v) && v == std::trunc(v) && std::abs(v) < 9e18; }

// Bounds print as ints when they are whole ("in [0, 1]").
std::string FormatNumber(double v) {
  if (IsIntegral(v)) return absl::StrCat(static_cast<int64_t>(v));
  return FormatDouble(v);
}

std::string BoundsText(const ArgSchema& arg) {
  if (arg.min && arg.max) {
    return absl::StrCat("in [", FormatNumber(*arg.min), ", ", FormatNumber(*arg.max), "]");
  }
  if (arg.min) return absl::StrCat(">= ", FormatNumber(*arg.min));
  return absl::StrCat("<= ", FormatNumber(*arg.max));
}

Status CheckBounds(const ArgSchema& arg, double v, const ArgValue& shown) {
  if ((arg.min && !(v >= *arg.min)) || (arg.max && !(v <= *arg.max))) {
    bool list = arg.type == ArgType::kIntList || arg.type == ArgType::kFloatList;
    return absl::InvalidArgumentError(
        absl::StrCat(arg.name, list ? ": every entry must be " : ": must be ", BoundsText(arg),
                     ", got ", ArgValueToString(shown)));
  }
  return absl::OkStatus();
}

// Converts `raw` to the schema's type (coercions included) or explains why not.
StatusOr<ArgValue> Coerce(const ArgSchema& arg, const ArgValue& raw) {
  switch (arg.type) {
    case ArgType::kInt:
      if (const auto* i = std::get_if<int64_t>(&raw)) return ArgValue(*i);
      if (const auto* d = std::get_if<double>(&raw); d && IsIntegral(*d)) {
        return ArgValue(static_cast<int64_t>(*d));
      }
      return TypeError(arg, raw);
    case ArgType::kFloat:
      if (const auto* d = std::get_if<double>(&raw)) return ArgValue(*d);
      if (const auto* i = std::get_if<int64_t>(&raw)) return ArgValue(static_cast<double>(*i));
      return TypeError(arg, raw);
    case ArgType::kBool:
      if (const auto* b = std::get_if<bool>(&raw)) return ArgValue(*b);
      return TypeError(arg, raw);
    case ArgType::kString:
      if (const auto* s = std::get_if<std::string>(&raw)) return ArgValue(*s);
      return TypeError(arg, raw);
    case ArgType::kIntList: {
      std::vector<int64_t> out;
      if (const auto* v = std::get_if<std::vector<int64_t>>(&raw)) {
        out = *v;
      } else if (const auto* dv = std::get_if<std::vector<double>>(&raw)) {
        for (double d : *dv) {
          if (!IsIntegral(d)) return TypeError(arg, raw);
          out.push_back(static_cast<int64_t>(d));
        }
      } else if (const auto* i = std::get_if<int64_t>(&raw)) {
        out.assign(arg.list_length > 0 ? arg.list_length : 1, *i);
      } else if (const auto* d = std::get_if<double>(&raw); d && IsIntegral(*d)) {
        out.assign(arg.list_length > 0 ? arg.list_length : 1, static_cast<int64_t>(*d));
      } else {
        return TypeError(arg, raw);
      }
      if (arg.list_length > 0 ? static_cast<int>(out.size()) != arg.list_length : out.empty()) {
        return TypeError(arg, raw);
      }
      return ArgValue(std::move(out));
    }
    case ArgType::kFloatList: {
      std::vector<double> out;
      if (const auto* dv = std::get_if<std::vector<double>>(&raw)) {
        out = *dv;
      } else if (const auto* v = std::get_if<std::vector<int64_t>>(&raw)) {
        out.assign(v->begin(), v->end());
      } else if (const auto* d = std::get_if<double>(&raw)) {
        out.assign(arg.list_length > 0 ? arg.list_length : 1, *d);
      } else if (const auto* i = std::get_if<int64_t>(&raw)) {
        out.assign(arg.list_length > 0 ? arg.list_length : 1, static_cast<double>(*i));
      } else {
        return TypeError(arg, raw);
      }
      if (arg.list_length > 0 ? static_cast<int>(out.size()) != arg.list_length : out.empty()) {
        return TypeError(arg, raw);
      }
      return ArgValue(std::move(out));
    }
  }
  return TypeError(arg, raw);
}

Status Validate(const ArgSchema& arg, const ArgValue& value) {
  if (arg.type == ArgType::kString && !arg.choices.empty()) {
    const std::string& s = std::get<std::string>(value);
    for (const std::string& c : arg.choices) {
      if (c == s) return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        arg.name, ": expected one of ", absl::StrJoin(arg.choices, ", "), ", got ", Quote(s)));
  }
  // No argument means anything by inf or nan: a non-finite float would only turn into
  // garbage pixels, an endless loop or a huge size further on.
  if (const auto* d = std::get_if<double>(&value); d && !std::isfinite(*d)) {
    return absl::InvalidArgumentError(
        absl::StrCat(arg.name, ": must be a finite number, got ", ArgValueToString(value)));
  }
  if (const auto* dv = std::get_if<std::vector<double>>(&value)) {
    for (double d : *dv) {
      if (!std::isfinite(d)) {
        return absl::InvalidArgumentError(absl::StrCat(
            arg.name, ": every entry must be a finite number, got ", ArgValueToString(value)));
      }
    }
  }
  if (!arg.min && !arg.max) return absl::OkStatus();
  switch (arg.type) {
    case ArgType::kInt:
      return CheckBounds(arg, static_cast<double>(std::get<int64_t>(value)), value);
    case ArgType::kFloat:
      return CheckBounds(arg, std::get<double>(value), value);
    case ArgType::kIntList:
      for (int64_t v : std::get<std::vector<int64_t>>(value)) {
        SLUICE_RETURN_IF_ERROR(CheckBounds(arg, static_cast<double>(v), value));
      }
      return absl::OkStatus();
    case ArgType::kFloatList:
      for (double v : std::get<std::vector<double>>(value)) {
        SLUICE_RETURN_IF_ERROR(CheckBounds(arg, v, value));
      }
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

}  // namespace

std::string_view ArgTypeName(ArgType type) {
  switch (type) {
    case ArgType::kInt:
      return "int";
    case ArgType::kFloat:
      return "float";
    case ArgType::kBool:
      return "bool";
    case ArgType::kString:
      return "string";
    case ArgType::kIntList:
      return "int list";
    case ArgType::kFloatList:
      return "float list";
  }
  return "?";
}

std::string ArgValueToString(const ArgValue& value) {
  struct Visitor {
    std::string operator()(int64_t v) const { return absl::StrCat(v); }
    std::string operator()(double v) const { return FormatDouble(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return Quote(v); }
    std::string operator()(const std::vector<int64_t>& v) const {
      return absl::StrCat("[", absl::StrJoin(v, ","), "]");
    }
    std::string operator()(const std::vector<double>& v) const {
      std::vector<std::string> parts;
      for (double d : v) parts.push_back(FormatDouble(d));
      return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
    }
  };
  return std::visit(Visitor{}, value);
}

const ArgSchema* OpSchema::FindArg(std::string_view arg_name) const {
  for (const ArgSchema& a : args) {
    if (a.name == arg_name) return &a;
  }
  return nullptr;
}

StatusOr<Args> BindArgs(const OpSchema& schema, const std::map<std::string, ArgValue>& raw) {
  for (const auto& [name, value] : raw) {
    if (schema.FindArg(name) == nullptr) {
      std::vector<std::string> valid;
      for (const ArgSchema& a : schema.args) valid.push_back(a.name);
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": unknown argument (valid: ",
          valid.empty() ? "none, this op takes no arguments" : absl::StrJoin(valid, ", "), ")"));
    }
  }
  std::map<std::string, ArgValue> bound;
  for (const ArgSchema& arg : schema.args) {
    auto it = raw.find(arg.name);
    if (it == raw.end()) {
      if (!arg.default_value) {
        return absl::InvalidArgumentError(
            absl::StrCat(arg.name, ": missing required argument (", Expected(arg), ")"));
      }
      bound.emplace(arg.name, *arg.default_value);
      continue;
    }
    SLUICE_ASSIGN_OR_RETURN(ArgValue value, Coerce(arg, it->second));
    SLUICE_RETURN_IF_ERROR(Validate(arg, value));
    bound.emplace(arg.name, std::move(value));
  }
  return Args(std::move(bound));
}

}  // namespace sluice::ops
