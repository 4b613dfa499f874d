#include "widgets/pool_palette.h"

#include "core/classify/pool_display.h"

#include <QApplication>
#include <QPalette>

namespace poolscope {

PoolPalette PoolPalette::fromSystem()
{
    return PoolPalette(QApplication::palette().color(QPalette::Window).lightness() < 128);
}

QColor PoolPalette::color(Pool pool) const
{
    switch (pool) {
    case Pool::Parameter:
        return QColor(0x00, 0x9e, 0x73); // bluish green
    case Pool::CastCache:
        return QColor(0x11, 0x77, 0x33); // dark green (Tol): weight-derived, beside the parameters
    case Pool::Gradient:
        return QColor(0xf0, 0xe4, 0x42); // yellow
    case Pool::OptimizerState:
        return QColor(0x00, 0x72, 0xb2); // blue
    case Pool::Activation:
        return QColor(0xd5, 0x5e, 0x00); // vermillion
    case Pool::KvCache:
        return QColor(0x88, 0x22, 0x55); // wine (Tol)
    case Pool::Temporary:
        return QColor(0xcc, 0x79, 0xa7); // reddish purple
    case Pool::Workspace:
        return QColor(0x99, 0x99, 0x33); // olive (Tol)
    case Pool::Input:
        return QColor(0x56, 0xb4, 0xe9); // sky blue
    case Pool::Other:
        return QColor(0xe6, 0x9f, 0x00); // orange
    case Pool::Unknown:
        return m_dark ? QColor(0x8c, 0x8c, 0x8c) : QColor(0x7f, 0x7f, 0x7f);
    case Pool::CachedFree:
        return m_dark ? QColor(0x5a, 0x5d, 0x63) : QColor(0xc8, 0xc8, 0xc8);
    }
    return Qt::gray;
}

QBrush PoolPalette::fill(Pool pool) const
{
    if (pool == Pool::CachedFree)
        return QBrush(color(pool), Qt::BDiagPattern);
    return QBrush(color(pool));
}

QString PoolPalette::label(Pool pool, bool classified)
{
    if (pool == Pool::Unknown && !classified)
        return QStringLiteral("allocated (unclassified)");
    if (pool == Pool::CachedFree)
        return QString::fromLatin1(kCachedFreeLabel.data(), qsizetype(kCachedFreeLabel.size()));
    return QString::fromLatin1(poolDisplayName(pool).data(), qsizetype(poolDisplayName(pool).size()));
}

} // namespace poolscope
