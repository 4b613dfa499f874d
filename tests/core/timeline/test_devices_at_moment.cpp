// Every device of a dump at one device's moment: paired by time (the devices of one process share a
// clock), never by event index; what cannot be paired says so instead of pretending.
#include "core/model/trace_builder.h"
#include "core/timeline/devices_at_moment.h"

#include <QTest>

using namespace poolscope;

namespace {

// A device whose allocations happen at the given times (one alloc per time, never freed).
DeviceTrace deviceAt(int index, const std::vector<int64_t>& times, std::vector<std::string>& warnings)
{
    DeviceTrace d;
    d.device = index;
    uint64_t addr = 0x1000;
    for (int64_t t : times) {
        d.events.push(Action::Alloc, addr, 1 << 20, 0, t, StackId{});
        addr += 1 << 21;
    }
    finalizeDevice(d, warnings);
    return d;
}

} // namespace

class TestDevicesAtMoment : public QObject {
    Q_OBJECT
private slots:
    void pairedByTimeNotByIndex()
    {
        Trace t;
        t.devices.push_back(deviceAt(0, {100, 200, 300, 400, 500, 600}, t.warnings));
        t.devices.push_back(deviceAt(1, {150, 450}, t.warnings)); // the moment: its event 1, at 450
        t.devices.push_back(deviceAt(2, {460, 470}, t.warnings));  // began after it
        t.devices.push_back(deviceAt(3, {}, t.warnings));          // segments only
        const auto m = devicesAtMoment(t, 1, 1);
        QCOMPARE(m.size(), size_t(4));
        QCOMPARE(m[1].event, EventIndex(1));
        QCOMPARE(m[1].how, DeviceAtMoment::How::Self);
        QCOMPARE(m[0].event, EventIndex(3)); // 400 <= 450 < 500
        QCOMPARE(m[0].how, DeviceAtMoment::How::ByTime);
        QCOMPARE(m[2].event, kNoEvent);
        QCOMPARE(m[2].how, DeviceAtMoment::How::BeforeFirst);
        QCOMPARE(m[3].how, DeviceAtMoment::How::NoHistory);
        // An event at exactly the moment's time is part of it.
        QCOMPARE(devicesAtMoment(t, 0, 3)[1].event, EventIndex(0)); // 400: device 1's 150
        QCOMPARE(devicesAtMoment(t, 0, 4)[1].event, EventIndex(1)); // 500: 450
        QCOMPARE(devicesAtMoment(t, 2, 0)[0].event, EventIndex(3)); // 460: 400
    }

    void withoutTimesEachKeepsItsOwnPeak()
    {
        Trace t;
        t.devices.push_back(deviceAt(0, {kNoTime, kNoTime, kNoTime}, t.warnings));
        t.devices.push_back(deviceAt(1, {100, 200}, t.warnings));
        const auto m = devicesAtMoment(t, 1, 1);
        QCOMPARE(m[0].how, DeviceAtMoment::How::OwnPeak);
        QCOMPARE(m[0].event, t.devices[0].peakIndex);
        const auto back = devicesAtMoment(t, 0, 2); // the moment itself has no time
        QCOMPARE(back[1].how, DeviceAtMoment::How::OwnPeak);
        QCOMPARE(back[0].how, DeviceAtMoment::How::Self);
    }

    void oomMomentIsTheDevicesLastOom()
    {
        Trace t;
        t.devices.push_back(deviceAt(0, {100, 200}, t.warnings));
        EventIndex e = 7;
        QVERIFY(!oomMoment(t, 0, &e));
        QVERIFY(!oomMoment(t, 5, &e));
        t.devices[0].ooms.push_back(OomEvent{0, 1, -1, 100});
        t.devices[0].ooms.push_back(OomEvent{1, 1, -1, 200});
        QVERIFY(oomMoment(t, 0, &e));
        QCOMPARE(e, EventIndex(1));
    }
};

QTEST_MAIN(TestDevicesAtMoment)
#include "test_devices_at_moment.moc"
