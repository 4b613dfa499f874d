#include "core/formats/py_value.h"

#include "core/util/huge_pages.h"

#include <bit>
#include <stdexcept>

namespace poolscope {

std::string_view pyKindName(PyKind k)
{
    switch (k) {
    case PyKind::None: return "None";
    case PyKind::Bool: return "bool";
    case PyKind::Int: return "int";
    case PyKind::UInt: return "int";
    case PyKind::Float: return "float";
    case PyKind::Str: return "str";
    case PyKind::Bytes: return "bytes";
    case PyKind::List: return "list";
    case PyKind::Tuple: return "tuple";
    case PyKind::Dict: return "dict";
    case PyKind::Released: return "released object";
    case PyKind::Stack: return "decoded frames list";
    }
    return "?";
}

double PyValue::asFloat() const
{
    switch (kind) {
    case PyKind::Float: return std::bit_cast<double>(i);
    case PyKind::UInt: return double(uint64_t(i));
    default: return double(i);
    }
}

PyValue PyValue::makeFloat(double v) { return PyValue{PyKind::Float, 0, std::bit_cast<int64_t>(v)}; }

void ValueArena::overBudget() const
{
    throw std::length_error("decoded data exceeds the memory budget of " + std::to_string(m_budget >> 20) + " MiB");
}

void ValueArena::reserveContainers(size_t n) { reserveHuge(m_containers, n); }

uint32_t ValueArena::newContainer(PyKind kind)
{
    if (!m_free.empty()) {
        const uint32_t ref = m_free.back();
        m_free.pop_back();
        m_containers[ref].kind = kind;
        m_containers[ref].memoIndex = UINT32_MAX;
        return ref;
    }
    if (m_containers.size() >= 0xFFFFFFF0u)
        throw std::length_error("more than 4 billion containers");
    charge(int64_t(sizeof(Container)));
    m_containers.push_back(Container{kind, 0, UINT32_MAX, {}});
    if (!m_spareItems.empty()) {
        m_containers.back().items = std::move(m_spareItems.back());
        m_spareItems.pop_back();
    }
    return uint32_t(m_containers.size() - 1);
}

void ValueArena::dropItems(uint32_t ref)
{
    auto& items = m_containers[ref].items;
    items.clear();
    // Enough spares for the frames lists of one APPENDS batch of entries (pickle batches 1000), each
    // small; a huge buffer is freed instead of held.
    constexpr size_t kMaxSpares = 4096, kMaxSpareItems = 256;
    if (items.capacity() != 0 && items.capacity() <= kMaxSpareItems && m_spareItems.size() < kMaxSpares)
        m_spareItems.push_back(std::move(items));
    std::vector<PyValue>().swap(items); // the slot keeps no capacity either way
}

void ValueArena::release(uint32_t ref)
{
    auto& c = m_containers[ref];
    if (ref < m_watchedContainers.size() && m_watchedContainers[ref]) [[unlikely]]
        ++m_memoEpoch;
    c.items.clear(); // capacity kept: the slot is reused for the next entry of the same shape
    c.kind = PyKind::Released;
    ++c.generation;
    if (m_memo && c.memoIndex < m_memo->size() && (*m_memo)[c.memoIndex].ref == ref &&
        PyValue{(*m_memo)[c.memoIndex].kind, 0, 0}.isContainer())
        (*m_memo)[c.memoIndex] = MemoSlot{};
    c.memoIndex = UINT32_MAX;
    m_free.push_back(ref);
}

uint32_t ValueArena::addString(std::string_view s, bool)
{
    charge(int64_t(s.size() + sizeof(std::string)));
    m_strings.emplace_back(s);
    return uint32_t(m_strings.size() - 1);
}

void ValueArena::append(uint32_t ref, const PyValue& v)
{
    auto& items = m_containers[ref].items;
    if (items.size() == items.capacity())
        charge(int64_t(items.capacity() + 4) * int64_t(sizeof(PyValue)));
    items.push_back(v);
}

void ValueArena::append(uint32_t ref, std::span<const PyValue> vs)
{
    auto& items = m_containers[ref].items;
    if (items.size() + vs.size() > items.capacity())
        charge(int64_t(items.size() + vs.size()) * int64_t(sizeof(PyValue)));
    items.insert(items.end(), vs.begin(), vs.end());
}

const PyValue* ValueArena::get(const PyValue& dict, std::string_view key) const
{
    if (dict.kind != PyKind::Dict)
        return nullptr;
    const auto& it = m_containers[dict.ref].items;
    for (size_t k = 0; k + 1 < it.size(); k += 2)
        if (it[k].kind == PyKind::Str && m_strings[it[k].ref] == key)
            return &it[k + 1];
    return nullptr;
}

} // namespace poolscope
