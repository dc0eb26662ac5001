package sluice.interop;

import java.io.File;
import java.util.function.BooleanSupplier;

/** Ends a program's wait: its work is done, the stop file appeared, or the deadline passed. */
final class Waits {
    private Waits() {
    }

    static String until(long deadlineNanos, String stopFile, BooleanSupplier done) throws InterruptedException {
        while (true) {
            if (done.getAsBoolean()) {
                return "complete";
            }
            if (stopFile != null && !stopFile.isEmpty() && new File(stopFile).exists()) {
                return "stopped";
            }
            if (System.nanoTime() >= deadlineNanos) {
                return "timeout";
            }
            Thread.sleep(20);
        }
    }

    static long deadline(Args a) {
        return System.nanoTime() + (long) (a.getDouble("timeout", 60) * 1e9);
    }
}
