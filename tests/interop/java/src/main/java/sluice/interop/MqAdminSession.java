package sluice.interop;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * mqadmin commands (RocketMQ's {@code MQAdminStartup}) run one after another in one JVM, as an operator types them:
 * a JSON array of a command's arguments per line on stdin, {@code {"out": "..."}} (what it printed, stdout and
 * stderr) per line on stdout. One JVM start for a session rather than one per command. A command that never ends by
 * itself is sent as {@code {"args": [...], "limitMs": N}}: interrupted after N ms.
 */
public final class MqAdminSession {
    private MqAdminSession() {
    }

    public static void main(String[] mainArgs) throws Exception {
        PrintStream out = System.out;
        PrintStream err = System.err;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            // A JSON array of arguments, or {"args": [...], "limitMs": N} for a command that never ends by itself
            // (clusterRT): it is interrupted after N ms, and what it printed until then is its output.
            List<String> args;
            long limitMs = 0;
            if (line.trim().startsWith("{")) {
                JSONObject request = JSON.parseObject(line);
                args = request.getJSONArray("args").toJavaList(String.class);
                limitMs = request.getLongValue("limitMs");
            } else {
                args = JSON.parseArray(line, String.class);
            }
            ByteArrayOutputStream buf = new ByteArrayOutputStream();
            PrintStream capture = new PrintStream(buf, true, "UTF-8");
            System.setOut(capture);
            System.setErr(capture);
            final String[] argv = args.toArray(new String[0]);
            Thread command = new Thread(() -> {
                try {
                    MQAdminStartup.main0(argv, null);
                } catch (Throwable t) {
                    t.printStackTrace(capture);
                }
            }, "mqadmin-command");
            try {
                command.start();
                if (limitMs > 0) {
                    command.join(limitMs);
                    command.interrupt();
                    command.join(10_000);
                } else {
                    command.join();
                }
            } finally {
                System.setOut(out);
                System.setErr(err);
            }
            capture.flush();
            JSONObject answer = new JSONObject();
            answer.put("out", new String(buf.toByteArray(), StandardCharsets.UTF_8));
            out.println(answer.toJSONString());
            out.flush();
        }
        // The admin client's threads are not daemons.
        System.exit(0);
    }
}
