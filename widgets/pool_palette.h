#pragma once
#include "core/classify/pool.h"

#include <QBrush>
#include <QColor>
#include <QString>

namespace poolscope {

// Fixed, colour-blind-safe pool colours (Okabe & Ito 2008). Activation (vermillion) and
// optimizer_state (blue) are the pair every form of colour blindness still tells apart; the rest
// follow the same palette, with greys for "other"/"unknown" and a hatched tint for the cache. The three
// pools Okabe & Ito's eight colours do not cover take Paul Tol's colour-blind-safe dark green, wine and
// olive, each far in lightness from its neighbours in the stack.
class PoolPalette {
public:
    explicit PoolPalette(bool dark = false) : m_dark(dark) {}
    static PoolPalette fromSystem(); // dark when the application's window colour is dark

    bool dark() const { return m_dark; }
    QColor color(Pool pool) const;
    QBrush fill(Pool pool) const;   // what the chart and the allocator view paint
    static QString label(Pool pool, bool classified = true); // "optimizer state", "KV cache", "allocated (unclassified)"

    QColor background() const { return m_dark ? QColor(0x1e, 0x1f, 0x22) : QColor(Qt::white); }
    QColor foreground() const { return m_dark ? QColor(0xe6, 0xe6, 0xe6) : QColor(0x20, 0x20, 0x20); }
    QColor grid() const { return m_dark ? QColor(0x3a, 0x3c, 0x40) : QColor(0xe2, 0xe2, 0xe2); }
    QColor oom() const { return QColor(0xd5, 0x00, 0x00); }
    QColor capacity() const { return m_dark ? QColor(0xff, 0x6e, 0x6e) : QColor(0xb0, 0x00, 0x20); }
    QColor cursor() const { return m_dark ? QColor(Qt::white) : QColor(Qt::black); }

private:
    bool m_dark;
};

} // namespace poolscope
