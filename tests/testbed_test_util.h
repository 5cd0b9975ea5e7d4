// Helpers shared by the testbed tests: whether the machine can host a testbed, and what a
// given process left behind.
#ifndef SLUICE_TESTS_TESTBED_TEST_UTIL_H_
#define SLUICE_TESTS_TESTBED_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <string>

#include "sluice/testbed/exec.h"
#include "sluice/testbed/testbed.h"

namespace sluice::testbed {

inline bool CanHostTestbed() { return geteuid() == 0 && DetectCgroupVersion().ok(); }

// Everything on the machine that belongs to a testbed made by process `pid`.
inline Resources ResourcesOfPid(pid_t pid) {
  StatusOr<Resources> all = ListResources();
  EXPECT_TRUE(all.ok()) << all.status();
  Resources mine;
  if (!all.ok()) return mine;
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%x", static_cast<unsigned>(pid));
  auto of_pid = [&](const std::string& name, const std::string& prefix) {
    // prefix + hex pid + one counter digit + a non-hex separator.
    const std::string head = prefix + hex;
    return name.rfind(head, 0) == 0 && name.size() > head.size() + 1 &&
           std::isxdigit(static_cast<unsigned char>(name[head.size()])) &&
           !std::isxdigit(static_cast<unsigned char>(name[head.size() + 1]));
  };
  for (const std::string& n : all->namespaces) {
    if (of_pid(n, kNamePrefix)) mine.namespaces.push_back(n);
  }
  for (const std::string& n : all->cgroups) {
    if (of_pid(n, kNamePrefix)) mine.cgroups.push_back(n);
  }
  for (const std::string& n : all->links) {
    if (of_pid(n, kVethPrefix)) mine.links.push_back(n);
  }
  for (const std::string& q : all->qdiscs) {
    if (q.find(std::string("dev ") + kVethPrefix + hex) != std::string::npos) {
      mine.qdiscs.push_back(q);
    }
  }
  return mine;
}

// Removes whatever process `pid` left (for a test's TearDown, whatever happened in it).
inline void RemoveResourcesOfPid(pid_t pid) {
  if (!CanHostTestbed()) return;
  const Resources left = ResourcesOfPid(pid);
  StatusOr<CgroupVersion> v = DetectCgroupVersion();
  for (const std::string& c : left.cgroups) {
    // Kill what is still inside before removing the group.
    RunProgram(
        {"sh", "-c",
         "for p in $(cat " + CgroupRoot(*v) + "/" + c + "/cgroup.procs); do kill -9 $p; done"})
        .IgnoreError();
  }
  for (const std::string& ns : left.namespaces)
    RunProgram({"ip", "netns", "del", ns}).IgnoreError();
  for (const std::string& l : left.links) RunProgram({"ip", "link", "del", l}).IgnoreError();
  for (const std::string& c : left.cgroups) {
    RunProgram({"rmdir", CgroupRoot(*v) + "/" + c}).IgnoreError();
  }
}

}  // namespace sluice::testbed

#endif  // SLUICE_TESTS_TESTBED_TEST_UTIL_H_
