#pragma once
#include "core/allocator/fragmentation.h"
#include "core/report/device_memory.h"

#include <QWidget>

#include <optional>

class QLabel;

namespace poolscope {

// "Fragmentation at the cursor", the way an engineer reasons about an OOM: one bar of what PyTorch
// reserved (allocated | free but too small for the failing request | free and large enough |
// returnable by empty_cache), the figures beside it, and at an OOM the device memory outside
// PyTorch. Fed from the cursor's MomentReport; holds nothing else.
class FragmentationView : public QWidget {
    Q_OBJECT
public:
    explicit FragmentationView(QWidget* parent = nullptr);

    void setFacts(const FragmentationBreakdown& f, const std::optional<OutsideMemory>& outside);
    QString text() const; // the rows as shown (tests read them)

    QSize sizeHint() const override;

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    FragmentationBreakdown m_f;
    std::optional<OutsideMemory> m_outside;
    QLabel* m_rows;
};

} // namespace poolscope
