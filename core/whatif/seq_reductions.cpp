// See seq_reductions.h.
#include "core/whatif/seq_reductions.h"

namespace poolscope {

int64_t reducedLength(int64_t tensor, int64_t reduced, int64_t tokens)
{
    if (tokens <= 0 || reduced <= 0 || reduced >= tensor || tensor % reduced != 0 || reduced % tokens != 0 ||
        reduced / tokens < 8)
        return 0;
    const int64_t q = tensor / reduced;
    return q >= 8 && tokens % q == 0 ? q : 0;
}

bool reducesOverSeq(int64_t tensor, int64_t reduced, int64_t tokens, int64_t s)
{
    if (tokens <= 0 || reduced <= 0 || reduced % tokens != 0)
        return false;
    if (s <= 0)
        return reducedLength(tensor, reduced, tokens) > 0;
    if (s <= 1 || tensor % s != 0)
        return false;
    const int64_t row = tensor / s;
    return reduced == row || 2 * reduced == row || reduced == 2 * row;
}

} // namespace poolscope
