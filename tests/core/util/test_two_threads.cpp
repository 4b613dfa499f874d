// onTwoThreads: both halves run and are done on return; an exception from either half leaves from
// the call after the other half has finished, instead of ending the program.
#include "core/util/two_threads.h"

#include <QtTest>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

using namespace poolscope;

class TestTwoThreads : public QObject {
    Q_OBJECT
private slots:
    void bothHalvesRunOnTwoThreads()
    {
        int a = 0, b = 0;
        std::thread::id here, there;
        onTwoThreads([&] { a = 1; here = std::this_thread::get_id(); }, [&] { b = 2; there = std::this_thread::get_id(); });
        QCOMPARE(a, 1);
        QCOMPARE(b, 2);
        QCOMPARE(here, std::this_thread::get_id());
        QVERIFY(there != here);
    }

    void hereThrowsAfterThereIsDone()
    {
        std::atomic<bool> done{false};
        bool caught = false;
        try {
            onTwoThreads([] { throw std::runtime_error("here"); }, [&] {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                done = true;
            });
        } catch (const std::runtime_error& e) {
            caught = std::string(e.what()) == "here";
            QVERIFY(done.load()); // joined before the exception left
        }
        QVERIFY(caught);
    }

    void thereThrowsIntoTheCaller()
    {
        bool hereRan = false, caught = false;
        try {
            onTwoThreads([&] { hereRan = true; }, [] { throw std::runtime_error("there"); });
        } catch (const std::runtime_error& e) {
            caught = std::string(e.what()) == "there";
        }
        QVERIFY(hereRan);
        QVERIFY(caught);
    }
};

QTEST_APPLESS_MAIN(TestTwoThreads)
#include "test_two_threads.moc"
