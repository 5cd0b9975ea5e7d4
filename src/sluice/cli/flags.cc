#include "sluice/cli/flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sluice::cli {
namespace {

std::string FormatDouble(double v) { return absl::StrFormat("%g", v); }

}  // namespace

FlagParser::FlagParser(std::string command, std::string synopsis, std::string program)
    : command_(std::move(command)), synopsis_(std::move(synopsis)), program_(std::move(program)) {}

FlagParser::Flag& FlagParser::Add(std::string name, Target target, std::string value_name,
                                  std::string doc, std::string default_text) {
  Flag flag;
  flag.name = std::move(name);
  flag.target = target;
  flag.value_name = std::move(value_name);
  flag.doc = std::move(doc);
  flag.default_text = std::move(default_text);
  flags_.push_back(std::move(flag));
  return flags_.back();
}

void FlagParser::AddInt(std::string name, int64_t* target, std::string value_name, std::string doc,
                        std::optional<int64_t> min, std::optional<int64_t> max) {
  Flag& flag =
      Add(std::move(name), target, std::move(value_name), std::move(doc), absl::StrCat(*target));
  if (min) flag.min = static_cast<double>(*min);
  if (max) flag.max = static_cast<double>(*max);
}

void FlagParser::AddDouble(std::string name, double* target, std::string value_name,
                           std::string doc, std::optional<double> min, std::optional<double> max) {
  Flag& flag =
      Add(std::move(name), target, std::move(value_name), std::move(doc), FormatDouble(*target));
  flag.min = min;
  flag.max = max;
}

void FlagParser::AddString(std::string name, std::string* target, std::string value_name,
                           std::string doc) {
  Add(std::move(name), target, std::move(value_name), std::move(doc), *target);
}

void FlagParser::AddBool(std::string name, bool* target, std::string doc, bool hidden) {
  Add(std::move(name), target, "", std::move(doc), *target ? "true" : "false").hidden = hidden;
}

FlagParser::Flag* FlagParser::Find(const std::string& name) {
  for (Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

bool FlagParser::IsSet(const std::string& name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return flag.set;
  }
  return false;
}

Status FlagParser::Assign(Flag& flag, const std::string& value) {
  const std::string where = absl::StrCat("--", flag.name);
  auto check_bounds = [&](double v) -> Status {
    if ((flag.min && v < *flag.min) || (flag.max && v > *flag.max)) {
      std::string range;
      if (flag.min && flag.max) {
        range = absl::StrCat("between ", FormatDouble(*flag.min), " and ", FormatDouble(*flag.max));
      } else if (flag.min) {
        range = absl::StrCat(">= ", FormatDouble(*flag.min));
      } else {
        range = absl::StrCat("<= ", FormatDouble(*flag.max));
      }
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected a value ", range, ", got ", value));
    }
    return absl::OkStatus();
  };

  if (auto* p = std::get_if<int64_t*>(&flag.target)) {
    int64_t v = 0;
    const char* end = value.data() + value.size();
    auto [ptr, ec] = std::from_chars(value.data(), end, v);
    if (value.empty() || ec != std::errc() || ptr != end) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected an integer, got '", value, "'"));
    }
    SLUICE_RETURN_IF_ERROR(check_bounds(static_cast<double>(v)));
    **p = v;
  } else if (auto* p = std::get_if<double*>(&flag.target)) {
    double v = 0;
    const char* end = value.data() + value.size();
    auto [ptr, ec] = std::from_chars(value.data(), end, v);
    if (value.empty() || ec != std::errc() || ptr != end || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected a number, got '", value, "'"));
    }
    SLUICE_RETURN_IF_ERROR(check_bounds(v));
    **p = v;
  } else if (auto* p = std::get_if<std::string*>(&flag.target)) {
    **p = value;
  } else if (auto* p = std::get_if<bool*>(&flag.target)) {
    if (value == "true" || value == "1" || value == "yes") {
      **p = true;
    } else if (value == "false" || value == "0" || value == "no") {
      **p = false;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected true or false, got '", value, "'"));
    }
  }
  flag.set = true;
  return absl::OkStatus();
}

Status FlagParser::Parse(const std::vector<std::string>& args) {
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      positional_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      help_requested_ = true;
      continue;
    }
    if (arg[1] != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", arg, "' (flags are spelled --name)"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '--", name, "'"));
    }
    if (std::holds_alternative<bool*>(flag->target) && !value) {
      *std::get<bool*>(flag->target) = true;
      flag->set = true;
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": missing value (", flag->value_name, ")"));
      }
      value = args[++i];
    }
    SLUICE_RETURN_IF_ERROR(Assign(*flag, *value));
  }
  return absl::OkStatus();
}

std::string FlagParser::Usage() const {
  std::string out = absl::StrCat("usage: ", program_, command_.empty() ? "" : " ", command_, " ",
                                 synopsis_, "\n");
  bool any = false;
  size_t width = 0;
  std::vector<std::pair<std::string, const Flag*>> rows;
  for (const Flag& flag : flags_) {
    if (flag.hidden) continue;
    std::string left = absl::StrCat("  --", flag.name);
    if (!flag.value_name.empty()) absl::StrAppend(&left, " ", flag.value_name);
    width = std::max(width, left.size());
    rows.emplace_back(std::move(left), &flag);
    any = true;
  }
  if (any) absl::StrAppend(&out, "\nflags:\n");
  for (const auto& [left, flag] : rows) {
    std::string line = left;
    line.resize(width + 2, ' ');
    absl::StrAppend(&line, flag->doc);
    if (!std::holds_alternative<bool*>(flag->target) && !flag->default_text.empty()) {
      const bool is_string = std::holds_alternative<std::string*>(flag->target);
      absl::StrAppend(&line, " (default: ", is_string ? "\"" : "", flag->default_text,
                      is_string ? "\"" : "", ")");
    }
    absl::StrAppend(&out, line, "\n");
  }
  absl::StrAppend(&out, "  --help", std::string(width > 8 ? width - 6 : 2, ' '),
                  "show this help\n");
  return out;
}

}  // namespace sluice::cli
