#include "app/args.h"

#include "core/util/atomic_file.h"
#include "core/util/load_error.h"
#include "core/util/units.h"

#include <iostream>

namespace poolscope::app {

CLI::Validator valueCheck(std::function<bool(const std::string&)> accepts, const std::string& kind, const std::string& what)
{
    return CLI::Validator(
        [accepts = std::move(accepts), what](std::string& value) -> std::string {
            return accepts(value) ? std::string() : "expects " + what + ", got '" + value + "'";
        },
        // A set of choices reads best beside the type ("TEXT:{full,selective,sqrt}"); a plain kind is
        // the option's type name instead (set where the option is declared).
        kind.rfind('{', 0) == 0 ? kind : std::string());
}

CLI::Validator sizeCheck(const std::string& example)
{
    return valueCheck([](const std::string& v) { return parseBytes(v) > 0; }, "SIZE", "a size such as " + example);
}

CLI::Option* addOptionalInt(CLI::App& app, const std::string& name, std::optional<int>& target, const std::string& description)
{
    return app.add_option_function<int>(name, [&target](const int& v) { target = v; }, description)->type_name("INT");
}

CLI::Option* addDeviceOption(CLI::App& app, std::optional<int>& target)
{
    return addOptionalInt(app, "--device", target, "the CUDA device to read (default: the one that ran out of memory, else the busiest)");
}

CLI::Option* addRulesOption(CLI::App& app, std::string& target)
{
    return app.add_option("--rules", target, "extra classifier rules (JSON), on top of the shipped and per-user ones")->type_name("FILE");
}

int guarded(const char* command, const std::function<int()>& body)
{
    const std::string prefix = std::string("poolscope ") + command + ": ";
    try {
        return body();
    } catch (const LoadError& e) {
        std::cerr << prefix << e.what() << "\n";
        return 2;
    } catch (const UsageError& e) {
        std::cerr << prefix << e.what() << " (see poolscope " << command << " --help)\n";
        return 2;
    } catch (const WriteError& e) {
        std::cerr << prefix << e.what() << "\n";
        return 2;
    } catch (const std::invalid_argument& e) {
        std::cerr << prefix << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << prefix << "internal error: " << e.what() << "\n";
        return 1;
    }
}

} // namespace poolscope::app
