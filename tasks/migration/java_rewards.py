"""The Java level's rewards: the project compiled and its own JUnit 4 tests run in the session's
sandbox (its environment's JDK, plain `javac`/`java`), the deprecated uses checked in source and
by the compiler's own deprecation warnings.

As for the Python levels (`migration_rewards.py`, whose report format and rewards' names it
shares): the original test classes are put back first; the harness's runner class (compiled apart
and placed before the project on the class path, after JUnit) reads a nonce from stdin before any
project class loads and reports on a line marked with it; `files_migrated` (0.5) is the share of
classes to migrate that pass the source checks, draw no `[deprecation]`/`[removal]` warning and
whose test class passes; `tests_pass` (0.5) needs every test class to pass once a class was
migrated.
"""

from __future__ import annotations

import re
import secrets

import agentcore_rl_harness as arl
from java_projects import check_java_file
from migration_projects import PROJECT_DIR
from migration_rewards import (_EVALUATIONS, MARK, TEST_TIMEOUT_S, Evaluation, ModuleResult, _parse_report, _sandbox,
                               read_source)
from migration_script import reference_script

JUNIT = "/usr/share/java/junit4.jar:/usr/share/java/hamcrest-core.jar"
CHECK_DIR = ".migration_check"
RUNNER = '''import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import org.junit.runner.JUnitCore;
import org.junit.runner.Result;
import org.junit.runner.notification.Failure;

public class ArlRunner {
    private static String quote(String text) {
        StringBuilder out = new StringBuilder("\\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\\\') out.append('\\\\').append(c);
            else if (c < 0x20) out.append(String.format("\\\\u%04x", (int) c));
            else out.append(c);
        }
        return out.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        String nonce = new BufferedReader(new InputStreamReader(System.in)).readLine().trim();
        PrintStream out = System.out;
        StringBuilder report = new StringBuilder("{");
        for (int i = 0; i < args.length; i++) {
            int run = 0, failed = 1;
            StringBuilder log = new StringBuilder();
            try {
                Result result = new JUnitCore().run(Class.forName(args[i]));
                run = result.getRunCount();
                failed = result.getFailureCount() + result.getIgnoreCount();
                for (Failure failure : result.getFailures()) log.append(failure.toString()).append('\\n');
            } catch (Throwable error) {
                log.append(error.toString());
            }
            String text = log.length() > 800 ? log.substring(log.length() - 800) : log.toString();
            report.append(i == 0 ? "" : ",").append(quote(args[i])).append(":{\\"run\\":").append(run)
                .append(",\\"failed\\":").append(failed).append(",\\"log\\":").append(quote(text)).append("}");
        }
        out.println();
        out.println(nonce + " ''' + MARK + ''' " + report.append("}"));
        out.flush();
        System.exit(0);
    }
}
'''
COMPILE = (f"set -e; rm -rf {CHECK_DIR}/runner {CHECK_DIR}/classes; "
           f"javac -nowarn -d {CHECK_DIR}/runner -cp {JUNIT} {CHECK_DIR}/ArlRunner.java; "
           f"javac -Xlint:deprecation,removal -d {CHECK_DIR}/classes -cp {JUNIT} "
           f"$(find {PROJECT_DIR}/src -name '*.java' | sort)")
_WARNING = re.compile(r"^(\S+\.java):(\d+): warning: \[(deprecation|removal)\] (.*)$", re.M)


async def run_java_checks(sandbox: arl.Sandbox, row: dict) -> Evaluation:
    """Put the original tests back, compile, run every test class, check each class to migrate."""
    for path, text in row["files"].items():
        if path.startswith("src/test/"):
            await sandbox.put_file(f"{PROJECT_DIR}/{path}", text)
    await sandbox.put_file(f"{CHECK_DIR}/ArlRunner.java", RUNNER)
    expected = dict(row["test_counts"])
    compiled = await sandbox.exec(["/bin/sh", "-c", COMPILE], timeout=TEST_TIMEOUT_S)
    if compiled.ok:
        nonce = secrets.token_hex(16)
        ran = await sandbox.exec(["java", "-cp", f"{JUNIT}:{CHECK_DIR}/runner:{CHECK_DIR}/classes", "ArlRunner",
                                  *expected], timeout=TEST_TIMEOUT_S, stdin=(nonce + "\n").encode())
        tests = _parse_report(ran.stdout, nonce, expected)
    else:
        errors = (compiled.stderr or compiled.stdout)[-600:]
        tests = tuple(ModuleResult(name, False, f"the project does not compile: {errors}") for name in expected)
    warned: dict[str, list[str]] = {}
    for match in _WARNING.finditer(compiled.stderr):
        warned.setdefault(match.group(1).removeprefix(f"{PROJECT_DIR}/"), []).append(
            f"line {match.group(2)}: javac [{match.group(3)}] {match.group(4)}")
    passed = {module.name for module in tests if module.passed}
    checks, migrated = [], []
    for target in row["targets"]:
        path = target["path"]
        source = await read_source(sandbox, path)
        check = check_java_file(path, target["kind"], source, row["files"][path])
        if warned.get(path):
            check = type(check)(check.path, check.kind, (*check.problems, *warned[path]))
        checks.append(check)
        test_class = path.removeprefix("src/main/java/").removesuffix(".java").replace("/", ".") + "Test"
        if check.ok and test_class in passed:
            migrated.append(path)
    return Evaluation(files=tuple(checks), tests=tests, migrated=tuple(migrated))


async def java_evaluation(rollout, row) -> Evaluation:
    found = _EVALUATIONS.get(rollout)
    if found is None:
        found = _EVALUATIONS[rollout] = await run_java_checks(_sandbox(rollout), row)
    return found


@arl.reward(weight=0.5, name="files_migrated")
async def java_files_migrated(rollout, row) -> float:
    checked = await java_evaluation(rollout, row)
    return len(checked.migrated) / len(row["targets"])


@arl.reward(weight=0.5, name="tests_pass")
async def java_tests_pass(rollout, row) -> float:
    checked = await java_evaluation(rollout, row)
    return float(checked.all_tests_pass and bool(checked.migrated))


def java_oracle_script(row: dict) -> dict:
    """Read each class to migrate, write its reference migration, run the tests, answer."""
    done = "; ".join(t["path"].rsplit("/", 1)[-1] for t in row["targets"])
    return reference_script(row, test_command="sh run_tests.sh", done=done)
