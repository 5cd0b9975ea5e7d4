// Shared slots (rpc/slot_arena.h): both ends in one process over a real sealed memfd.
#include "sluice/rpc/slot_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::rpc {
namespace {

using ::testing::HasSubstr;

// Two regions of four 64-float slots.
SlotArenaLayout SmallLayout() {
  SlotArenaLayout l;
  l.regions = 2;
  l.slots = 4;
  l.slot_bytes = 256;
  return l;
}

const Shape kSlotShape = {64};  // f32: 256 bytes

struct Ends {
  std::shared_ptr<SlotArena> trainer;
  std::shared_ptr<SlotArenaWriter> worker;
};

Ends MakeEnds(const SlotArenaLayout& layout = SmallLayout()) {
  Ends e;
  auto arena = SlotArena::Create(layout);
  EXPECT_TRUE(arena.ok()) << arena.status();
  if (!arena.ok()) return e;
  e.trainer = *arena;
  auto writer = SlotArenaWriter::Map(e.trainer->fd(), layout);
  EXPECT_TRUE(writer.ok()) << writer.status();
  if (writer.ok()) e.worker = *writer;
  e.trainer->CloseFd();
  return e;
}

// The worker's slot `s` of `region` (a buffer from TakeRegion), filled with `value`.
Tensor WriteSlot(const std::shared_ptr<Buffer>& region, int s, float value) {
  auto t = Tensor::View(DType::kF32, kSlotShape, region, static_cast<size_t>(s) * 256);
  EXPECT_TRUE(t.ok());
  float* p = t->mutable_data<float>();
  for (int i = 0; i < 64; ++i) p[i] = value + static_cast<float>(i);
  return *t;
}

TEST(SlotArenaLayoutTest, BoundsAreChecked) {
  EXPECT_TRUE(SmallLayout().Check().ok());
  SlotArenaLayout l = SmallLayout();
  l.regions = 0;
  EXPECT_THAT(l.Check().message(), HasSubstr("0 regions"));
  l = SmallLayout();
  l.regions = kSlotArenaMaxRegions + 1;
  EXPECT_FALSE(l.Check().ok());
  l = SmallLayout();
  l.slot_bytes = 100;  // not a multiple of the wire's alignment
  EXPECT_THAT(l.Check().message(), HasSubstr("multiple of 64"));
  l = SmallLayout();
  l.slots = 1u << 31;
  l.slot_bytes = uint64_t{1} << 40;  // would overflow a naive product
  EXPECT_THAT(l.Check().message(), HasSubstr("over the"));
  // Regions start on a page; the header is one page for up to 64 regions.
  EXPECT_EQ(SmallLayout().header_bytes(), 4096u);
  EXPECT_EQ(SmallLayout().region_stride(), 4096u);
  EXPECT_EQ(SmallLayout().total_bytes(), 3 * 4096u);
}

// What the worker writes into a slot is what the trainer's view of it reads, without a copy;
// a region whose every slot was named goes back to the worker once the last view is gone,
// and not before.
TEST(SlotArenaTest, NamedSlotsAreViewsAndAFullRegionReturnsWhenItsViewsGo) {
  Ends e = MakeEnds();
  ASSERT_NE(e.worker, nullptr);
  std::shared_ptr<Buffer> a = e.worker->TakeRegion();
  std::shared_ptr<Buffer> b = e.worker->TakeRegion();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->data(), b->data());
  EXPECT_EQ(e.worker->TakeRegion(), nullptr) << "both regions are the worker's already";

  std::vector<Tensor> views;
  for (int s = 0; s < 4; ++s) {
    const Tensor written = WriteSlot(a, s, 100.0f * s);
    const std::optional<uint64_t> at = e.worker->OffsetOf(written);
    ASSERT_TRUE(at.has_value());
    auto view = e.trainer->Claim(*at, DType::kF32, kSlotShape);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->data<float>()[5], 100.0f * s + 5);
    views.push_back(*std::move(view));
  }
  // The four views tile one buffer, in slot order: what the batcher turns into a view.
  for (int s = 1; s < 4; ++s) {
    EXPECT_EQ(views[s].buffer(), views[0].buffer());
    EXPECT_EQ(views[s].offset(), views[0].offset() + static_cast<size_t>(s) * 256);
  }
  a.reset();  // the worker is done with its region
  EXPECT_EQ(e.trainer->regions_returned(), 0);
  views.pop_back();
  EXPECT_EQ(e.trainer->regions_returned(), 0) << "three views still read the region";
  views.clear();
  EXPECT_EQ(e.trainer->regions_returned(), 1);
  std::shared_ptr<Buffer> again = e.worker->TakeRegion();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(e.trainer->slots_claimed(), 4);
}

TEST(SlotArenaTest, SlotsNamedWronglyAreRefusedWithTheirOffset) {
  Ends e = MakeEnds();
  ASSERT_NE(e.worker, nullptr);
  const SlotArenaLayout l = SmallLayout();
  const uint64_t first = l.region_offset(0);
  // Outside the regions: the flag page, past the end.
  EXPECT_THAT(e.trainer->Claim(0, DType::kF32, kSlotShape).status().message(),
              HasSubstr("outside the regions"));
  EXPECT_THAT(e.trainer->Claim(l.total_bytes(), DType::kF32, kSlotShape).status().message(),
              HasSubstr("outside the regions"));
  // Off a slot's boundary, and in a region's padding up to its page.
  EXPECT_THAT(e.trainer->Claim(first + 64, DType::kF32, kSlotShape).status().message(),
              HasSubstr("not on a slot"));
  EXPECT_THAT(e.trainer->Claim(first + 4 * 256, DType::kF32, kSlotShape).status().message(),
              HasSubstr("not on a slot"));
  // Of another size, or a shape whose size overflows.
  EXPECT_THAT(e.trainer->Claim(first, DType::kF32, {32}).status().message(),
              HasSubstr("is not a slot's 256 bytes"));
  EXPECT_FALSE(e.trainer->Claim(first, DType::kF32, {int64_t{1} << 62, 4}).ok());
  // Named twice in a round.
  ASSERT_TRUE(e.trainer->Claim(first, DType::kF32, kSlotShape).ok());
  const Status twice = e.trainer->Claim(first, DType::kF32, kSlotShape).status();
  EXPECT_TRUE(absl::IsDataLoss(twice));
  EXPECT_THAT(twice.message(), HasSubstr("named twice"));
  EXPECT_THAT(twice.message(), HasSubstr(absl::StrCat("byte ", first)));
}

// A region whose round is full is the trainer's until its views go: a worker naming a slot
// of it again (writing over what a batch may be reading) is refused.
TEST(SlotArenaTest, ARegionNotGivenBackCannotBeNamedAgain) {
  Ends e = MakeEnds();
  ASSERT_NE(e.worker, nullptr);
  const uint64_t first = SmallLayout().region_offset(0);
  std::vector<Tensor> views;
  for (int s = 0; s < 4; ++s) {
    auto v = e.trainer->Claim(first + static_cast<uint64_t>(s) * 256, DType::kF32, kSlotShape);
    ASSERT_TRUE(v.ok()) << v.status();
    views.push_back(*std::move(v));
  }
  EXPECT_THAT(e.trainer->Claim(first, DType::kF32, kSlotShape).status().message(),
              HasSubstr("is not the worker's"));
  views.clear();
  EXPECT_TRUE(e.trainer->Claim(first, DType::kF32, kSlotShape).ok()) << "a new round";
}

// A forked child (a Python DataLoader's worker process, say) that drops the views it
// inherited gives no region back: the parent still reads them.
TEST(SlotArenaTest, AForkedChildDroppingViewsGivesNothingBack) {
  Ends e = MakeEnds();
  ASSERT_NE(e.worker, nullptr);
  std::shared_ptr<Buffer> region = e.worker->TakeRegion();  // region 0, filled and named
  std::shared_ptr<Buffer> other = e.worker->TakeRegion();   // region 1, the worker's
  ASSERT_NE(region, nullptr);
  ASSERT_NE(other, nullptr);
  std::vector<Tensor> views;
  for (int s = 0; s < 4; ++s) {
    auto v = e.trainer->Claim(*e.worker->OffsetOf(WriteSlot(region, s, 1.0f)), DType::kF32,
                              kSlotShape);
    ASSERT_TRUE(v.ok());
    views.push_back(*std::move(v));
  }
  region.reset();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    views.clear();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(e.worker->TakeRegion(), nullptr) << "region 0 was given back by the child";
  views.clear();
  EXPECT_EQ(e.trainer->regions_returned(), 1);
  EXPECT_NE(e.worker->TakeRegion(), nullptr);
}

// After the session ends no region goes back, and the views stay readable (the mapping lives
// as long as they do), even once the arena itself is gone.
TEST(SlotArenaTest, AfterCloseViewsStayValidAndNothingIsGivenBack) {
  Ends e = MakeEnds();
  ASSERT_NE(e.worker, nullptr);
  std::shared_ptr<Buffer> region = e.worker->TakeRegion();
  ASSERT_NE(region, nullptr);
  std::vector<Tensor> views;
  for (int s = 0; s < 4; ++s) {
    const Tensor written = WriteSlot(region, s, 7.0f);
    auto v = e.trainer->Claim(*e.worker->OffsetOf(written), DType::kF32, kSlotShape);
    ASSERT_TRUE(v.ok());
    views.push_back(*std::move(v));
  }
  region.reset();
  e.worker.reset();  // the worker's mapping is gone
  e.trainer->Close();
  EXPECT_FALSE(e.trainer->Claim(SmallLayout().region_offset(1), DType::kF32, kSlotShape).ok());
  e.trainer.reset();
  EXPECT_EQ(views[3].data<float>()[63], 70.0f);
  views.clear();
}

// A worker maps only a sealed memfd of exactly the size announced.
TEST(SlotArenaWriterTest, MapsOnlyASealedMemfdOfTheAnnouncedSize) {
  const SlotArenaLayout l = SmallLayout();
  const int unsealed = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, static_cast<off_t>(l.total_bytes())), 0);
  EXPECT_THAT(SlotArenaWriter::Map(unsealed, l).status().message(), HasSubstr("sealed memfd"));
  ASSERT_EQ(fcntl(unsealed, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  SlotArenaLayout bigger = l;
  bigger.regions = 3;
  EXPECT_THAT(SlotArenaWriter::Map(unsealed, bigger).status().message(),
              HasSubstr("sealed memfd"));
  EXPECT_TRUE(SlotArenaWriter::Map(unsealed, l).ok());
  SlotArenaLayout bad = l;
  bad.slot_bytes = 3;
  EXPECT_FALSE(SlotArenaWriter::Map(unsealed, bad).ok());
  close(unsealed);
}

// A tensor that is not a whole slot of a region (another buffer, a piece of a slot, a
// slot-sized piece off a slot's start) has no offset: it goes as bytes.
TEST(SlotArenaWriterTest, OnlyTensorsInRegionsHaveAnOffset) {
  Ends e = MakeEnds();
  ASSERT_NE(e.worker, nullptr);
  EXPECT_FALSE(e.worker->OffsetOf(Tensor::Empty(DType::kF32, kSlotShape)).has_value());
  std::shared_ptr<Buffer> region = e.worker->TakeRegion();
  ASSERT_NE(region, nullptr);
  auto small = Tensor::View(DType::kF32, {8}, region, 0);
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE(e.worker->OffsetOf(*small).has_value()) << "not a slot's size";
  auto off_slot = Tensor::View(DType::kF32, kSlotShape, region, 64);
  ASSERT_TRUE(off_slot.ok());
  EXPECT_FALSE(e.worker->OffsetOf(*off_slot).has_value()) << "not on a slot's start";
  const Tensor slot = WriteSlot(region, 2, 0);
  EXPECT_EQ(e.worker->OffsetOf(slot), SmallLayout().region_offset(0) + 2 * 256);
}

}  // namespace
}  // namespace sluice::rpc
