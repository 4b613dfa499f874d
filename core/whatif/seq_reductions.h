#pragma once
// A reduction over the sequence: one value per row of a tensor whose last dimension is s long (the
// attention scores' softmax: its maximum and its sum, b*a*s values of b*a*s*s). Read from sizes
// alone, so a dump with Python frames only, or renamed code, shows the same ones as a full one. One
// definition, used by the size laws (law_attention.cpp: a chain seeded by its reductions; law_dims.cpp:
// s and the score width where no frame names the mask or softmax) and by the precision plan
// (plan_softmax.cpp: the softmax's two reductions between attention's products).
#include <cstdint>

namespace poolscope {

// Whether `reduced` bytes hold one value per row of `tensor` bytes over a last dimension of s (a
// multiple of `tokens` bytes: the rows follow the tokens). With s known: the rows at the tensor's
// element size, or at half or twice it (16-bit statistics of fp32 scores, an fp32 sum of 16-bit
// ones, int64 indices beside fp32 values). With s unknown (0): a strict divisor of the tensor whose ratio
// is a possible s (reducedLength), at the same element size.
bool reducesOverSeq(int64_t tensor, int64_t reduced, int64_t tokens, int64_t s);

// The length of the dimension `reduced` is `tensor` reduced over, at one element size, when it can
// be the sequence: at least 8, dividing the tokens (T = b*s), and the reduced tensor at least 8
// bytes per token (more than one value per token: heads; a norm's statistics, one fp32 value per
// token, reduce over the width h instead). 0 when it cannot.
int64_t reducedLength(int64_t tensor, int64_t reduced, int64_t tokens);

} // namespace poolscope
