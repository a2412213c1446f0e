// main.cpp - the one doctest main of the unit tests.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "neusight/predictor.h"
#include "test_util.h"

namespace {

// Records the running test case's name for test::have_dataset's skip line, and keeps OpenBLAS
// on the calling thread as the CLI does (predictor.h single_threaded_blas): its workers spin in
// sched_yield between the small products of the networks.
struct CurrentTest : doctest::IReporter {
  explicit CurrentTest(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override { neusight::single_threaded_blas(); }
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& t) override { neusight::test::current_test() = t.m_name; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("current-test", 1, CurrentTest);
