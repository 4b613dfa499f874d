#include "app/args.h"

#include "core/util/atomic_file.h"
#include "core/util/load_error.h"

#include <iostream>

namespace poolscope::app {

std::optional<std::string> Args::option(const std::string& name)
{
    for (size_t i = 0; i < m_args.size(); ++i) {
        if (m_args[i] == name) {
            if (i + 1 >= m_args.size())
                throw UsageError(name + " needs a value");
            std::string v = m_args[i + 1];
            m_args.erase(m_args.begin() + ptrdiff_t(i), m_args.begin() + ptrdiff_t(i) + 2);
            return v;
        }
        if (m_args[i].rfind(name + "=", 0) == 0) {
            std::string v = m_args[i].substr(name.size() + 1);
            m_args.erase(m_args.begin() + ptrdiff_t(i));
            return v;
        }
    }
    return std::nullopt;
}

bool Args::flag(const std::string& name)
{
    for (size_t i = 0; i < m_args.size(); ++i)
        if (m_args[i] == name) {
            m_args.erase(m_args.begin() + ptrdiff_t(i));
            return true;
        }
    return false;
}

int Args::intOption(const std::string& name, int fallback)
{
    const auto v = option(name);
    if (!v)
        return fallback;
    try {
        size_t used = 0;
        const int n = std::stoi(*v, &used);
        if (used != v->size())
            throw std::invalid_argument("");
        return n;
    } catch (const std::exception&) {
        throw UsageError(name + " expects an integer, got '" + *v + "'");
    }
}

std::vector<std::string> Args::positionals()
{
    for (const auto& a : m_args)
        if (a.size() > 1 && a[0] == '-' && a != "-")
            throw UsageError("unknown option " + a);
    return m_args;
}

int guarded(const char* command, const std::function<int()>& body)
{
    try {
        return body();
    } catch (const LoadError& e) {
        std::cerr << "poolscope " << command << ": " << e.what() << "\n";
        return 2;
    } catch (const UsageError& e) {
        std::cerr << "poolscope " << command << ": " << e.what() << " (see poolscope --help)\n";
        return 2;
    } catch (const WriteError& e) {
        std::cerr << "poolscope " << command << ": " << e.what() << "\n";
        return 2;
    } catch (const std::invalid_argument& e) {
        std::cerr << "poolscope " << command << ": " << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "poolscope " << command << ": internal error: " << e.what() << "\n";
        return 1;
    }
}

} // namespace poolscope::app
