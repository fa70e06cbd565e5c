"""The Java level's class templates: one per API deprecated or removed between Java 8 and 17,
each in its Java 8 form and its migrated form, with a JUnit 4 test class.

Templates use `string.Template` (`$name`), so Java's braces stay as they are. The tests pass on
the migrated form; on the Java 8 form they pass too, except where Java 17 removed the API
(`javax.xml.bind` no longer compiles) or the test asks for the replacement's contract
(`AutoCloseable` instead of a finalizer).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JavaKind:
    """One deprecated API: its class, its old and new source, its tests and the hint."""

    name: str
    cls: str  # the class name, `$Noun` filled in
    old: str
    new: str
    tests: str
    test_count: int
    hint: str


BOXING_OLD = '''package com.example.$domain;

import java.util.ArrayList;
import java.util.List;

/** Counts of ${noun}s, boxed for the $domain reports. */
public class ${Noun}Counts {
    public static Integer parseCount(String text) {
        return new Integer(text.trim());
    }

    public static List<Long> widen(int[] values) {
        List<Long> out = new ArrayList<>();
        for (int value : values) {
            out.add(new Long(value * ${factor}L));
        }
        return out;
    }

    public static Double ratio(int part, int whole) {
        return new Double((double) part / whole);
    }
}
'''

BOXING_NEW = BOXING_OLD.replace("new Integer(text.trim())", "Integer.valueOf(text.trim())") \
    .replace("new Long(value * ${factor}L)", "Long.valueOf(value * ${factor}L)") \
    .replace("new Double((double) part / whole)", "Double.valueOf((double) part / whole)")

BOXING_TESTS = '''package com.example.$domain;

import static org.junit.Assert.assertEquals;

import java.util.Arrays;
import org.junit.Test;

public class ${Noun}CountsTest {
    @Test
    public void parsesACount() {
        assertEquals(Integer.valueOf($a), ${Noun}Counts.parseCount(" $a "));
    }

    @Test
    public void widensEachValue() {
        assertEquals(Arrays.asList(${af}L, ${bf}L), ${Noun}Counts.widen(new int[] {$a, $b}));
    }

    @Test
    public void dividesAsDouble() {
        assertEquals(0.25, ${Noun}Counts.ratio(1, 4), 1e-9);
    }
}
'''

THREAD_OLD = '''package com.example.$domain;

import java.util.concurrent.atomic.AtomicInteger;

/** Polls the $domain feed for new ${noun}s on a worker thread until stopped. */
public class ${Noun}Poller {
    private final AtomicInteger ticks = new AtomicInteger();
    private Thread worker;

    public void start() {
        worker = new Thread(() -> {
            while (true) {
                ticks.incrementAndGet();
                try {
                    Thread.sleep(1);
                } catch (InterruptedException e) {
                    // keep polling
                }
            }
        }, "$domain-poller");
        worker.start();
    }

    public void stop() throws InterruptedException {
        worker.stop();
        worker.join(5000);
    }

    public boolean running() {
        return worker != null && worker.isAlive();
    }

    public int ticks() {
        return ticks.get();
    }
}
'''

THREAD_NEW = THREAD_OLD.replace("while (true) {", "while (!Thread.currentThread().isInterrupted()) {") \
    .replace("""                } catch (InterruptedException e) {
                    // keep polling
                }""", """                } catch (InterruptedException e) {
                    return;
                }""").replace("worker.stop();", "worker.interrupt();")

THREAD_TESTS = '''package com.example.$domain;

import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import org.junit.Test;

public class ${Noun}PollerTest {
    @Test
    public void stopsItsWorker() throws Exception {
        ${Noun}Poller poller = new ${Noun}Poller();
        poller.start();
        for (int i = 0; i < 500 && poller.ticks() < $a; i++) {
            Thread.sleep(10);
        }
        assertTrue(poller.ticks() >= $a);
        poller.stop();
        assertFalse(poller.running());
    }

    @Test
    public void isIdleBeforeStart() {
        assertFalse(new ${Noun}Poller().running());
    }
}
'''

JAXB_OLD = '''package com.example.$domain;

import java.nio.charset.StandardCharsets;
import javax.xml.bind.DatatypeConverter;

/** Encodes $noun labels for the $domain export files. */
public class ${Noun}Codec {
    public static String encode(String text) {
        return DatatypeConverter.printBase64Binary(text.getBytes(StandardCharsets.UTF_8));
    }

    public static String decode(String encoded) {
        return new String(DatatypeConverter.parseBase64Binary(encoded), StandardCharsets.UTF_8);
    }

    public static String hex(byte[] data) {
        return DatatypeConverter.printHexBinary(data);
    }
}
'''

JAXB_NEW = '''package com.example.$domain;

import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.HexFormat;

/** Encodes $noun labels for the $domain export files. */
public class ${Noun}Codec {
    public static String encode(String text) {
        return Base64.getEncoder().encodeToString(text.getBytes(StandardCharsets.UTF_8));
    }

    public static String decode(String encoded) {
        return new String(Base64.getDecoder().decode(encoded), StandardCharsets.UTF_8);
    }

    public static String hex(byte[] data) {
        return HexFormat.of().withUpperCase().formatHex(data);
    }
}
'''

JAXB_TESTS = '''package com.example.$domain;

import static org.junit.Assert.assertEquals;

import org.junit.Test;

public class ${Noun}CodecTest {
    @Test
    public void encodesBase64() {
        assertEquals("$b64", ${Noun}Codec.encode("$label"));
    }

    @Test
    public void decodesWhatItEncodes() {
        assertEquals("$label", ${Noun}Codec.decode(${Noun}Codec.encode("$label")));
    }

    @Test
    public void printsUpperCaseHex() {
        assertEquals("$hex", ${Noun}Codec.hex(new byte[] {(byte) $a, (byte) $hb}));
    }
}
'''

FINALIZER_OLD = '''package com.example.$domain;

import java.util.concurrent.atomic.AtomicInteger;

/** A handle on the $domain store; counts the ${noun} handles still open. */
public class ${Noun}Handle {
    private static final AtomicInteger OPEN = new AtomicInteger();
    private boolean released;

    public ${Noun}Handle() {
        OPEN.incrementAndGet();
    }

    public static int openHandles() {
        return OPEN.get();
    }

    public synchronized void release() {
        if (!released) {
            released = true;
            OPEN.decrementAndGet();
        }
    }

    @Override
    protected void finalize() throws Throwable {
        release();
        super.finalize();
    }
}
'''

FINALIZER_NEW = FINALIZER_OLD.replace("public class ${Noun}Handle {", "public class ${Noun}Handle implements AutoCloseable {") \
    .replace("""    @Override
    protected void finalize() throws Throwable {
        release();
        super.finalize();
    }""", """    @Override
    public void close() {
        release();
    }""")

FINALIZER_TESTS = '''package com.example.$domain;

import static org.junit.Assert.assertEquals;

import org.junit.Test;

public class ${Noun}HandleTest {
    @Test
    public void releasesOnce() {
        int before = ${Noun}Handle.openHandles();
        ${Noun}Handle handle = new ${Noun}Handle();
        assertEquals(before + 1, ${Noun}Handle.openHandles());
        handle.release();
        handle.release();
        assertEquals(before, ${Noun}Handle.openHandles());
    }

    @Test
    public void closesInTryWithResources() throws Exception {
        int before = ${Noun}Handle.openHandles();
        try (AutoCloseable handle = (AutoCloseable) (Object) new ${Noun}Handle()) {
            assertEquals(before + 1, ${Noun}Handle.openHandles());
        }
        assertEquals(before, ${Noun}Handle.openHandles());
    }
}
'''

DATE_OLD = '''package com.example.$domain;

import java.util.Date;

/** Calendar arithmetic for the $domain ${noun} schedule. */
public class ${Noun}Schedule {
    public static String shift(int year, int month, int day, int days) {
        Date date = new Date(year - 1900, month - 1, day);
        date.setDate(date.getDate() + days);
        return String.format("%04d-%02d-%02d", date.getYear() + 1900, date.getMonth() + 1, date.getDate());
    }

    /** 1 = Monday ... 7 = Sunday. */
    public static int dayOfWeek(int year, int month, int day) {
        int sundayFirst = new Date(year - 1900, month - 1, day).getDay();
        return sundayFirst == 0 ? 7 : sundayFirst;
    }
}
'''

DATE_NEW = '''package com.example.$domain;

import java.time.LocalDate;

/** Calendar arithmetic for the $domain ${noun} schedule. */
public class ${Noun}Schedule {
    public static String shift(int year, int month, int day, int days) {
        return LocalDate.of(year, month, day).plusDays(days).toString();
    }

    /** 1 = Monday ... 7 = Sunday. */
    public static int dayOfWeek(int year, int month, int day) {
        return LocalDate.of(year, month, day).getDayOfWeek().getValue();
    }
}
'''

DATE_TESTS = '''package com.example.$domain;

import static org.junit.Assert.assertEquals;

import org.junit.Test;

public class ${Noun}ScheduleTest {
    @Test
    public void shiftsAcrossAMonthEnd() {
        assertEquals("$shifted", ${Noun}Schedule.shift($year, $month, $day, $days));
    }

    @Test
    public void keepsTheDateForZeroDays() {
        assertEquals("$start", ${Noun}Schedule.shift($year, $month, $day, 0));
    }

    @Test
    public void namesTheWeekday() {
        assertEquals($weekday, ${Noun}Schedule.dayOfWeek($year, $month, $day));
    }
}
'''

JAVA_KINDS = {
    "boxing": JavaKind("boxing", "${Noun}Counts", BOXING_OLD, BOXING_NEW, BOXING_TESTS, 3,
                       "replace the deprecated boxing constructors (new Integer/Long/Double) with valueOf"),
    "thread_stop": JavaKind("thread_stop", "${Noun}Poller", THREAD_OLD, THREAD_NEW, THREAD_TESTS, 2,
                            "replace Thread.stop() with interrupt() and a worker that ends when interrupted"),
    "jaxb": JavaKind("jaxb", "${Noun}Codec", JAXB_OLD, JAXB_NEW, JAXB_TESTS, 3,
                     "replace javax.xml.bind.DatatypeConverter (removed in Java 11) with java.util.Base64 "
                     "and java.util.HexFormat"),
    "finalizer": JavaKind("finalizer", "${Noun}Handle", FINALIZER_OLD, FINALIZER_NEW, FINALIZER_TESTS, 2,
                          "replace the finalize() override with AutoCloseable.close()"),
    "date": JavaKind("date", "${Noun}Schedule", DATE_OLD, DATE_NEW, DATE_TESTS, 3,
                     "replace the deprecated java.util.Date arithmetic with java.time.LocalDate"),
}

RUN_TESTS = '''#!/bin/sh
# Compile the project and run its JUnit 4 tests (the Java 17 JDK and junit4 are installed).
set -e
rm -rf /tmp/classes && mkdir -p /tmp/classes
javac -Xlint:deprecation,removal -d /tmp/classes -cp /usr/share/java/junit4.jar `find src -name '*.java'`
java -cp /usr/share/java/junit4.jar:/tmp/classes org.junit.runner.JUnitCore $TESTS
'''
