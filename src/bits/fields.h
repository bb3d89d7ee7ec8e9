// Votes in integer fields: the field-sum algorithm's format. Element e's vote
// (0 or 1) sits in bits [f*(e % per), f*(e % per) + f) of word e / per, where
// f is the field width and per = floor(64 / f) fields per word; adding such
// words as integers adds every field at once, with no carry across fields as
// long as every sum fits in f bits. Ternary mode uses two word planes (+1
// votes, -1 votes), as the bit-sliced counters do.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bits/bits.h"

namespace signlion {
namespace bits {

// Words holding `count` fields of `fieldBits` bits.
constexpr size_t fieldWordsFor(size_t count, int fieldBits) {
  return (count + (size_t)(64 / fieldBits) - 1) / (size_t)(64 / fieldBits);
}

// count elements of src -> votePlanes(zero) planes of fieldWordsFor(count)
// words (second plane at out + stride). Unused fields are zero.
void packFields(const Kernels& k, const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t zero,
                int fieldBits, uint64_t* out, size_t stride);

// The counts in fields [first, first + n) -> `width` bit-sliced planes over
// the blocks of those elements (first must be a multiple of 64): plane p at
// planes + p * planeStride. Counts must fit in width bits.
void fieldsToPlanes(const uint64_t* words, int fieldBits, size_t first, size_t n, uint64_t* planes, int width,
                    size_t planeStride);

}  // namespace bits
}  // namespace signlion
