package sluice.interop;

import java.util.Arrays;

/**
 * Client programs on the Apache RocketMQ Java client, run by Sluice's tests as child processes.
 *
 * <pre>
 * java -cp ... sluice.interop.Main produce       --namesrv H:P --topic T --group G --mode sync|async|oneway|batch|orderly --out F
 *                                                (or --mode sync --senders JSON: a producer per {topic, access_key, secret_key})
 * java -cp ... sluice.interop.Main push-consume  --namesrv H:P --topic T --group G [--expression E] [--model broadcasting]
 *                                                [--orderly] [--reconsume-later N] [--max-reconsume-times N] --out F
 * java -cp ... sluice.interop.Main pop-consume   --namesrv H:P --topic T --group G [--fail-once-suffix S] --out F
 * java -cp ... sluice.interop.Main lite-pull     --namesrv H:P --topic T --group G [--assign] [--seek Q:OFFSET,...] --out F
 * java -cp ... sluice.interop.Main admin         --namesrv H:P          (JSON requests on stdin, JSON answers on stdout)
 * java -cp ... sluice.interop.Main bench         --namesrv H:P --topic T --mode sync|async|batch|consume ...
 * java -cp ... sluice.interop.Main transact      --namesrv H:P --topic T --group G [--count N] --stop-file F --out F
 * java -cp ... sluice.interop.Main request-reply --namesrv H:P --topic T --group G --role request|respond [--count N]
 *                                                [--stop-file F] --out F
 * java -cp ... sluice.interop.Main recall        --namesrv H:P --topic T --group G [--delay-ms N] [--recall-handle H] --out F
 * </pre>
 *
 * Every program writes one JSON object per line (flushed at once) and ends by itself: when its work is done,
 * when {@code --stop-file} appears or at {@code --timeout} seconds. The RocketMQ client's threads are not daemons,
 * so every program ends with {@code System.exit}.
 */
public final class Main {
    private Main() {
    }

    public static void main(String[] argv) throws Exception {
        if (argv.length == 0) {
            System.err.println("usage: Main produce|push-consume|pop-consume|lite-pull|admin|bench|transact|request-reply|recall [--option value ...]");
            System.exit(2);
        }
        Args args = Args.parse(Arrays.copyOfRange(argv, 1, argv.length));
        int code;
        try {
            switch (argv[0]) {
                case "produce":
                    code = Produce.run(args);
                    break;
                case "push-consume":
                    code = PushConsume.run(args);
                    break;
                case "pop-consume":
                    code = PopConsume.run(args);
                    break;
                case "lite-pull":
                    code = LitePull.run(args);
                    break;
                case "admin":
                    code = Admin.run(args);
                    break;
                case "bench":
                    code = Bench.run(args);
                    break;
                case "transact":
                    code = Transact.run(args);
                    break;
                case "request-reply":
                    code = RequestReply.run(args);
                    break;
                case "recall":
                    code = Recall.run(args);
                    break;
                default:
                    System.err.println("unknown program: " + argv[0]);
                    code = 2;
            }
        } catch (Throwable e) {
            e.printStackTrace();
            code = 1;
        }
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(code);
    }
}
