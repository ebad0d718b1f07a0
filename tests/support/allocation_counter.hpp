// SPDX-License-Identifier: Apache-2.0
/// @file
/// Replacement global allocation functions that count the allocations a thread makes inside an
/// `allocation_scope`, so a test can check that a policy's `step` does not allocate.
///
/// Include it in exactly one translation unit of a test binary: it defines (not declares) the
/// replaceable `operator new` and `operator delete` overloads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace tgs::testing {

namespace detail {
// Per thread, so counting is thread-safe without atomics and a scope sees only the allocations
// of the code it wraps, never those of another thread that happens to run meanwhile.
inline thread_local bool counting = false;
inline thread_local std::uint64_t count = 0;

inline void note_allocation() noexcept {
  if (counting) ++count;
}

inline void* allocate(std::size_t size) {
  note_allocation();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc{};
}

inline void* allocate_aligned(std::size_t size, std::align_val_t alignment) {
  note_allocation();
  const auto align = static_cast<std::size_t>(alignment);
  // std::aligned_alloc wants a size that is a multiple of the alignment.
  const std::size_t rounded = ((size == 0 ? 1 : size) + align - 1) / align * align;
  if (void* p = std::aligned_alloc(align, rounded)) return p;
  throw std::bad_alloc{};
}
}  // namespace detail

/// Counts this thread's allocations from construction to destruction. Scopes do not nest.
///
/// ```cpp
/// tgs::testing::allocation_scope scope;
/// policy.step(obs);
/// EXPECT_EQ(scope.allocations(), 0u);
/// ```
class allocation_scope {
 public:
  allocation_scope() noexcept : before_(detail::count) { detail::counting = true; }
  ~allocation_scope() { detail::counting = false; }
  allocation_scope(const allocation_scope&) = delete;
  allocation_scope& operator=(const allocation_scope&) = delete;

  /// Allocations this thread made since the scope began.
  [[nodiscard]] std::uint64_t allocations() const noexcept { return detail::count - before_; }

 private:
  std::uint64_t before_;
};

}  // namespace tgs::testing

void* operator new(std::size_t size) {
  return tgs::testing::detail::allocate(size);
}
void* operator new[](std::size_t size) {
  return tgs::testing::detail::allocate(size);
}
void* operator new(std::size_t size, std::align_val_t alignment) {
  return tgs::testing::detail::allocate_aligned(size, alignment);
}
void* operator new[](std::size_t size, std::align_val_t alignment) {
  return tgs::testing::detail::allocate_aligned(size, alignment);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return tgs::testing::detail::allocate(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return tgs::testing::detail::allocate(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new(std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  try {
    return tgs::testing::detail::allocate_aligned(size, alignment);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  try {
    return tgs::testing::detail::allocate_aligned(size, alignment);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
