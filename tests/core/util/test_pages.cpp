// Page helpers: populatePages faults memory in without changing a byte of it; ColumnStock hands out
// zeroed columns of its length, made ones first.
#include "core/util/column_stock.h"
#include "core/util/huge_pages.h"

#include <QtTest>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <numeric>
#include <unistd.h>

using namespace poolscope;

namespace {
// Resident bytes of this process (Linux /proc/self/statm); -1 where unknown.
int64_t residentBytes()
{
    std::ifstream statm("/proc/self/statm");
    int64_t size = 0, resident = -1;
    statm >> size >> resident;
    return resident < 0 ? -1 : resident * int64_t(sysconf(_SC_PAGESIZE));
}
} // namespace

class TestPages : public QObject {
    Q_OBJECT
private slots:
    void populateFaultsInWithoutWriting()
    {
        constexpr size_t kWritten = 1000, kReserved = size_t(64) << 17; // 64 MB of int64
        std::vector<int64_t> v(kWritten);
        std::iota(v.begin(), v.end(), int64_t(1));
        v.reserve(kReserved);
        const int64_t before = residentBytes();
        // The written entries and the fresh tail in one call: the pages around the boundary hold both.
        const bool supported = populatePages(v.data() + kWritten / 2, (kReserved - kWritten / 2) * sizeof(int64_t));
        for (size_t i = 0; i < kWritten; ++i)
            QCOMPARE(v[i], int64_t(i + 1));
        if (!supported || before < 0)
            QSKIP("MADV_POPULATE_WRITE or /proc/self/statm not available here");
        // Faulted in now: the tail is resident before anything writes it.
        QVERIFY2(residentBytes() - before > int64_t(kReserved * sizeof(int64_t)) * 9 / 10,
                 qPrintable(QString("resident grew by %1 bytes").arg(residentBytes() - before)));
        v.resize(kReserved);
        QVERIFY(std::all_of(v.begin() + kWritten, v.end(), [](int64_t x) { return x == 0; }));
        QVERIFY(populatePages(nullptr, 0));
    }

    void stockHandsOutZeroedColumns()
    {
        ColumnStock stock(5000);
        std::atomic<bool> stop{false};
        stock.fill(2, stop);
        QCOMPARE(stock.ready(), size_t(2));
        std::vector<int64_t> a = stock.take();
        std::fill(a.begin(), a.end(), 7); // a taken column is the taker's: others stay zero
        for (int k = 0; k < 3; ++k) { // one made, then two new ones
            const std::vector<int64_t> c = stock.take();
            QCOMPARE(c.size(), size_t(5000));
            QVERIFY(std::all_of(c.begin(), c.end(), [](int64_t x) { return x == 0; }));
        }
        QCOMPARE(stock.ready(), size_t(0));
        stock.fill(3, stop);
        stock.clear();
        QCOMPARE(stock.ready(), size_t(0));
        stop = true;
        stock.fill(3, stop); // told to stop before it began: makes none
        QCOMPARE(stock.ready(), size_t(0));
    }
};

QTEST_GUILESS_MAIN(TestPages)
#include "test_pages.moc"
