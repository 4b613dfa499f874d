// Build tool: draws the application icon (an SVG) at the freedesktop hicolor sizes, so the PNGs in a
// package come from the one checked-in drawing. Usage: poolscope_render_icons SVG OUTDIR SIZE...
// writes OUTDIR/<size>x<size>/apps/<name of SVG>.png. Runs during the build, without a display.
#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QPainter>
#include <QSvgRenderer>

#include <cstdio>

int main(int argc, char** argv)
{
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s SVG OUTDIR SIZE...\n", argv[0]);
        return 2;
    }
    // No QGuiApplication: raster painting of paths into a QImage needs no platform plugin, so the
    // tool runs on a build machine without a display (the icon has no text, which would need fonts).
    const QString svg = QString::fromLocal8Bit(argv[1]);
    QSvgRenderer renderer(svg);
    if (!renderer.isValid()) {
        std::fprintf(stderr, "%s: not a valid SVG image\n", argv[1]);
        return 2;
    }
    const QString name = QFileInfo(svg).completeBaseName();
    for (int i = 3; i < argc; ++i) {
        bool ok = false;
        const int size = QString::fromLocal8Bit(argv[i]).toInt(&ok);
        if (!ok || size < 1 || size > 4096) {
            std::fprintf(stderr, "%s: not an icon size (1..4096)\n", argv[i]);
            return 2;
        }
        QImage image(size, size, QImage::Format_ARGB32_Premultiplied);
        image.fill(Qt::transparent);
        {
            QPainter painter(&image);
            painter.setRenderHint(QPainter::Antialiasing);
            renderer.render(&painter, QRectF(0, 0, size, size));
        }
        const QString dir = QStringLiteral("%1/%2x%2/apps").arg(QString::fromLocal8Bit(argv[2])).arg(size);
        const QString out = dir + QLatin1Char('/') + name + QStringLiteral(".png");
        if (!QDir().mkpath(dir) || !image.save(out, "PNG")) {
            std::fprintf(stderr, "%s: could not write\n", qPrintable(out));
            return 1;
        }
    }
    return 0;
}
