#pragma once
// Draws a plot into SVG the way the review image's vector export does (QCPPainter, pmVectorized).
#include <qcustomplot.h>

#include <QBuffer>
#include <QSvgGenerator>

inline QByteArray renderSvg(QCustomPlot& plot, QSize size)
{
    QBuffer out;
    out.open(QIODevice::WriteOnly);
    QSvgGenerator svg;
    svg.setOutputDevice(&out);
    svg.setSize(size);
    QCPPainter painter(&svg);
    painter.setMode(QCPPainter::pmVectorized);
    plot.toPainter(&painter, size.width(), size.height());
    painter.end();
    return out.data();
}
