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
 * stderr) per line on stdout. One JVM start for a session rather than one per command.
 */
public final class MqAdminSession {
    private MqAdminSession() {
    }

    public static void main(String[] argv) throws Exception {
        PrintStream out = System.out;
        PrintStream err = System.err;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            List<String> args = JSON.parseArray(line, String.class);
            ByteArrayOutputStream buf = new ByteArrayOutputStream();
            PrintStream capture = new PrintStream(buf, true, "UTF-8");
            System.setOut(capture);
            System.setErr(capture);
            try {
                MQAdminStartup.main0(args.toArray(new String[0]), null);
            } catch (Throwable t) {
                t.printStackTrace(capture);
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
