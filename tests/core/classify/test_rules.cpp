// Rules are data: the shipped file loads, covers the frameworks it promises, and a bad user file
// fails with an error that names the rule and the field.
#include "core/classify/rules.h"
#include "core/classify/text_pattern.h"
#include "core/util/load_error.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

using namespace poolscope;

namespace {

std::string errorOf(const std::string& json)
{
    try {
        (void)RuleSet::parse(json, "user.json");
    } catch (const LoadError& e) {
        return e.what();
    }
    return {};
}

std::string rulesDoc(const std::string& rule) { return R"({"version": 1, "rules": [)" + rule + "]}"; }

std::vector<std::string> names(const RuleSet& s)
{
    std::vector<std::string> out;
    for (const auto& r : s.rules())
        out.push_back(r.name);
    return out;
}

} // namespace

class TestRules : public QObject {
    Q_OBJECT
private slots:
    void defaultRulesLoad()
    {
        const RuleSet set = RuleSet::fromFile(std::string(POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json"));
        QVERIFY(set.rules().size() >= 30);
        QVERIFY(set.phasePatterns().size() >= 10);
        QVERIFY(set.annotationPatterns().size() >= 4);
        std::set<std::string> seen;
        for (const auto& r : set.rules()) {
            QVERIFY2(seen.insert(r.name).second, r.name.c_str());
            QVERIFY2(!r.reason.empty(), r.name.c_str());
            QVERIFY(r.pool != Pool::CachedFree);
        }
    }

    // The copy compiled into the binary is the file: an installed poolscope classifies the same way.
    void builtinRulesAreTheFile()
    {
        const RuleSet file = RuleSet::fromFile(std::string(POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json"));
        const RuleSet builtin = RuleSet::builtin();
        QCOMPARE(builtin.rules().size(), file.rules().size());
        for (size_t i = 0; i < file.rules().size(); ++i) {
            QCOMPARE(builtin.rules()[i].name, file.rules()[i].name);
            QCOMPARE(builtin.rules()[i].pool, file.rules()[i].pool);
            QCOMPARE(builtin.rules()[i].reason, file.rules()[i].reason);
        }
        QCOMPARE(builtin.phasePatterns().size(), file.phasePatterns().size());
        QCOMPARE(builtin.annotationPatterns().size(), file.annotationPatterns().size());
    }

    // The frameworks the issue names each have at least one rule or phase pattern that mentions them.
    void defaultRulesCoverFrameworks()
    {
        const RuleSet set = RuleSet::fromFile(std::string(POOLSCOPE_SOURCE_DIR "/resources/classifier/rules.json"));
        std::string all;
        for (const auto& r : set.rules())
            for (const auto* list : {&r.framesAny, &r.framesAll, &r.framesNone})
                for (const auto& p : *list)
                    all += p.file + " " + p.function + "\n";
        for (const auto& p : set.phasePatterns())
            all += p.pattern.file + " " + p.pattern.function + "\n";
        for (const char* needle : {"torch/optim/", "_init_group", "zero_grad", "torch/utils/checkpoint", "torch/distributed/fsdp/",
                                   "all_gather", "deepspeed/runtime/zero/", "transformers/", "accelerate/", "lightning",
                                   "bitsandbytes/optim/", "apex/optimizers/", "apex/(amp", "torch::autograd::(Engine",
                                   "AccumulateGrad", "Backward", "CublasHandlePool", "Workspace"})
            QVERIFY2(all.find(needle) != std::string::npos, needle);
    }

    void missingDefaultFileIsAnError()
    {
        QVERIFY_THROWS_EXCEPTION(LoadError, RuleSet::fromFile("/nonexistent/rules.json"));
    }

    void errorsNameRuleAndField_data()
    {
        QTest::addColumn<QString>("doc");
        QTest::addColumn<QString>("expected");
        QTest::newRow("not json") << "{\"rules\": [" << "not valid JSON";
        QTest::newRow("top-level field") << "{\"rulez\": []}" << "unknown top-level field 'rulez'";
        QTest::newRow("version") << "{\"version\": 7, \"rules\": []}" << "only version 1";
        QTest::newRow("no name") << QString::fromStdString(rulesDoc(R"({"pool": "gradient", "reason": "x"})")) << "rule 0: field 'name'";
        QTest::newRow("bad pool")
            << QString::fromStdString(rulesDoc(R"({"name": "a", "pool": "x", "reason": "r"},{"name": "b", "pool": "grad", "reason": "r"})"))
            << "rule 0 'a': field 'pool': unknown pool 'x'";
        QTest::newRow("cached_free is not an allocation pool")
            << QString::fromStdString(rulesDoc(R"({"name": "a", "pool": "cached_free", "reason": "r"})")) << "rule 0 'a': field 'pool'";
        QTest::newRow("second rule")
            << QString::fromStdString(rulesDoc(R"({"name": "ok", "pool": "gradient", "reason": "r"},{"name": "bad", "pool": "grad", "reason": "r"})"))
            << "rule 1 'bad': field 'pool'";
        QTest::newRow("bad regex")
            << QString::fromStdString(rulesDoc(R"({"name": "re", "pool": "temporary", "reason": "r", "frames_any": [{"function": "*oops"}]})"))
            << "rule 0 're': field 'frames_any[0].function': bad regular expression '*oops'";
        QTest::newRow("empty pattern")
            << QString::fromStdString(rulesDoc(R"({"name": "p", "pool": "temporary", "reason": "r", "frames_none": [{}]})"))
            << "rule 0 'p': field 'frames_none[0]'";
        QTest::newRow("unknown field")
            << QString::fromStdString(rulesDoc(R"({"name": "u", "pool": "temporary", "reason": "r", "phases": ["forward"]})"))
            << "rule 0 'u': field 'phases': unknown field";
        QTest::newRow("bad phase")
            << QString::fromStdString(rulesDoc(R"({"name": "ph", "pool": "temporary", "reason": "r", "phase": ["fwd"]})"))
            << "rule 0 'ph': field 'phase': unknown phase 'fwd'";
        QTest::newRow("never is only for free_phase")
            << QString::fromStdString(rulesDoc(R"({"name": "ph", "pool": "temporary", "reason": "r", "phase": ["never"]})"))
            << "field 'phase'";
        QTest::newRow("bad lifetime")
            << QString::fromStdString(rulesDoc(R"({"name": "lt", "pool": "temporary", "reason": "r", "lifetime": ["forever"]})"))
            << "rule 0 'lt': field 'lifetime': unknown lifetime 'forever'";
        QTest::newRow("contradiction")
            << QString::fromStdString(rulesDoc(
                   R"({"name": "c", "pool": "temporary", "reason": "r", "lifetime": ["freed"], "not_lifetime": ["freed"]})"))
            << "rule 0 'c': field 'not_lifetime'";
        QTest::newRow("confidence")
            << QString::fromStdString(rulesDoc(R"({"name": "cf", "pool": "temporary", "reason": "r", "confidence": 120})"))
            << "rule 0 'cf': field 'confidence'";
        QTest::newRow("size")
            << QString::fromStdString(rulesDoc(R"({"name": "s", "pool": "temporary", "reason": "r", "size": {"min": 10, "max": 5}})"))
            << "rule 0 's': field 'size': min is larger than max";
        QTest::newRow("mirrors")
            << QString::fromStdString(rulesDoc(R"({"name": "m", "pool": "temporary", "reason": "r", "size": {"mirrors": "weights"}})"))
            << "rule 0 'm': field 'size.mirrors'";
        QTest::newRow("empty reason")
            << QString::fromStdString(rulesDoc(R"({"name": "e", "pool": "temporary", "reason": ""})")) << "rule 0 'e': field 'reason'";
        QTest::newRow("duplicate")
            << QString::fromStdString(rulesDoc(R"({"name": "d", "pool": "temporary", "reason": "r"},{"name": "d", "pool": "input", "reason": "r"})"))
            << "rule 1 'd': field 'name': duplicate";
        QTest::newRow("innermost and innermost_python")
            << QString::fromStdString(rulesDoc(
                   R"({"name": "ip", "pool": "parameter", "reason": "r", "innermost": 3, "innermost_python": 1, "frames_any": [{"function": "x"}]})"))
            << "rule 0 'ip': field 'innermost_python': give";
        QTest::newRow("innermost_python range")
            << QString::fromStdString(rulesDoc(R"({"name": "ip", "pool": "parameter", "reason": "r", "innermost_python": 0})"))
            << "rule 0 'ip': field 'innermost_python': expected an integer from 1";
        QTest::newRow("phase pattern")
            << "{\"phases\": [{\"name\": \"pp\", \"phase\": \"sideways\", \"function\": \"x\"}]}" << "phase pattern 0 'pp': field 'phase'";
        QTest::newRow("annotation regex")
            << "{\"annotations\": [{\"name\": \"an\", \"match\": \"[\", \"phase\": \"forward\"}]}" << "annotation pattern 0 'an': field 'match'";
    }
    void errorsNameRuleAndField()
    {
        QFETCH(QString, doc);
        QFETCH(QString, expected);
        const std::string err = errorOf(doc.toStdString());
        QVERIFY2(!err.empty(), "no error");
        QVERIFY2(err.find(expected.toStdString()) != std::string::npos, err.c_str());
        QVERIFY2(err.rfind("user.json", 0) == 0, err.c_str()); // the file comes first, one line
        QVERIFY(err.find('\n') == std::string::npos);
    }

    // The fields issue 15 added parse into the rule: the new pools, the innermost Python frames, the
    // half-parameter mirror, the no-history lifetimes and the teardown phase.
    void issue15FieldsParse()
    {
        const RuleSet set = RuleSet::parse(rulesDoc(R"({"name": "a", "pool": "cast_cache", "reason": "r", "innermost_python": 2,
            "frames_any": [{"function": "x"}], "size": {"mirrors": "half_parameter"}, "lifetime": ["no_history", "unrecorded"],
            "free_phase": ["teardown"]},
            {"name": "b", "pool": "kv_cache", "reason": "r"}, {"name": "c", "pool": "workspace", "reason": "r"})"),
                                           "user.json");
        const Rule& r = set.rules().at(0);
        QCOMPARE(r.pool, Pool::CastCache);
        QCOMPARE(r.innermostPython, 2);
        QCOMPARE(r.mirrors, SizeMirror::HalfParameter);
        QCOMPARE(r.lifetimeAll, uint16_t(bit(Lifetime::NoHistory) | bit(Lifetime::Unrecorded)));
        QCOMPARE(r.freePhaseMask, uint8_t(1u << unsigned(Phase::Teardown)));
        QCOMPARE(set.rules().at(1).pool, Pool::KvCache);
        QCOMPARE(set.rules().at(2).pool, Pool::Workspace);
    }

    void userRulesOverrideByName()
    {
        RuleSet base = RuleSet::parse(R"({"rules": [
            {"name": "a", "pool": "gradient", "reason": "ra"},
            {"name": "b", "pool": "activation", "reason": "rb"},
            {"name": "c", "pool": "temporary", "reason": "rc"}]})",
                                      "default.json");
        const RuleSet user = RuleSet::parse(R"({"rules": [
            {"name": "b", "pool": "input", "reason": "mine"},
            {"name": "c", "disabled": true},
            {"name": "new1", "pool": "other", "reason": "n1"},
            {"name": "new2", "pool": "other", "reason": "n2"},
            {"name": "late", "pool": "other", "reason": "l", "after": "a"},
            {"name": "a", "pool": "gradient", "reason": "moved", "before": "new1"}]})",
                                            "user.json");
        base.merge(user);
        QCOMPARE(names(base), (std::vector<std::string>{"a", "new1", "new2", "late", "b"}));
        QCOMPARE(base.rules()[0].reason, std::string("moved"));
        QCOMPARE(base.rules()[4].pool, Pool::Input);
        QCOMPARE(base.rules()[4].origin, std::string("user.json"));
        QCOMPARE(base.sources().size(), size_t(2));
    }

    void placementAnchorMustExist()
    {
        RuleSet base = RuleSet::parse(R"({"rules": [{"name": "a", "pool": "gradient", "reason": "r"}]})", "d.json");
        const RuleSet user = RuleSet::parse(R"({"rules": [{"name": "x", "pool": "input", "reason": "r", "before": "nope"}]})", "u.json");
        try {
            base.merge(user);
            QFAIL("no error");
        } catch (const LoadError& e) {
            QVERIFY2(std::string(e.what()).find("rule 'x': field 'before': no rule named 'nope'") != std::string::npos, e.what());
        }
    }

    void phaseAndAnnotationPatternsMerge()
    {
        RuleSet base = RuleSet::parse(R"({"phases": [{"name": "p1", "phase": "forward", "function": "^forward$"},
                                                      {"name": "p2", "phase": "backward", "function": "^backward$"}],
                                          "annotations": [{"name": "a1", "match": "^step", "phase": "optimizer_step"}]})",
                                      "d.json");
        base.merge(RuleSet::parse(R"({"phases": [{"name": "p2", "disabled": true},
                                                 {"name": "mine", "phase": "zero_grad", "function": "^clear$"}],
                                      "annotations": [{"name": "a1", "match": "^my_step", "phase": "optimizer_step"}]})",
                                  "u.json"));
        QCOMPARE(base.phasePatterns().size(), size_t(2));
        QCOMPARE(base.phasePatterns()[0].name, std::string("mine")); // user patterns take priority
        QCOMPARE(base.annotationPatterns()[0].match, std::string("^my_step"));
        QVERIFY(base.regexes()[size_t(base.annotationPatterns()[0].regex)].search("my_step#1"));
    }

    // The string fast path and std::regex give the same answers.
    void textPatternMatchesStdRegex()
    {
        const std::vector<std::string> patterns = {
            "torch/optim/",
            "^(_call_impl|_wrapped_call_impl)$",
            "^torch::autograd::(Engine|python::PythonEngine)::",
            "^torch::autograd::generated::|^torch::autograd::(AccumulateGrad|CopyBackwards)::apply",
            R"(THPVariable_to\(|^_to_copy$)",
            R"(^enumerate\(DataLoader\)#)",
            R"(torch/nn/modules/module\.py)",
            "Backward|backward",
            "^step$",
            "^zero_grad$|^Optimizer\\.zero_grad#",
            R"(Backward\d*$)",                        // regex path
            "[Oo]ptimi[sz]er[ _.]?[Ss]tep",            // regex path
            R"(^(a|b)c(d|e)$)",                       // two groups: regex path
            R"(\$money)",
            "end$",
        };
        const std::vector<std::string> texts = {"",
                                                "torch/optim/adamw.py",
                                                "/site-packages/torch/optim/optimizer.py",
                                                "_call_impl",
                                                "x_call_impl",
                                                "_call_impl2",
                                                "torch::autograd::Engine::thread_main(std::shared_ptr<>)",
                                                "torch::autograd::python::PythonEngine::thread_init(int)",
                                                "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)",
                                                "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)",
                                                "torch::autograd::THPVariable_to(_object*, _object*, _object*)",
                                                "torch::autograd::THPVariable_tolist(_object*)",
                                                "_to_copy",
                                                "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                                                "/lib/torch/nn/modules/module.py",
                                                "/lib/torch/nn/modules/moduleXpy",
                                                "ReluBackward1",
                                                "backward",
                                                "step",
                                                "steps",
                                                "zero_grad",
                                                "Optimizer.zero_grad#AdamW.zero_grad",
                                                "Optimizer_step",
                                                "optimiser step",
                                                "acd",
                                                "bce",
                                                "abd",
                                                "$money",
                                                "the end",
                                                "end of"};
        int fastPaths = 0;
        for (const auto& p : patterns) {
            const TextPattern tp = TextPattern::compile(p);
            fastPaths += tp.usesRegex() ? 0 : 1;
            const std::regex re(p, std::regex::ECMAScript);
            for (const auto& t : texts)
                QVERIFY2(tp.search(t) == std::regex_search(t, re), (p + " on '" + t + "'").c_str());
        }
        QVERIFY(fastPaths >= 11);
        QVERIFY_THROWS_EXCEPTION(std::regex_error, TextPattern::compile("(a|b"));
    }
};

QTEST_GUILESS_MAIN(TestRules)
#include "test_rules.moc"
