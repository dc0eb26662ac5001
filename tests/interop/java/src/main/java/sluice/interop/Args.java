package sluice.interop;

import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.remoting.RPCHook;

/** {@code --key value} options; a {@code --flag} followed by another option (or nothing) is "true". */
final class Args {
    private final Map<String, String> values = new HashMap<>();

    static Args parse(String[] argv) {
        Args a = new Args();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected an --option, got " + argv[i]);
            }
            String key = argv[i].substring(2);
            if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) {
                a.values.put(key, argv[++i]);
            } else {
                a.values.put(key, "true");
            }
        }
        return a;
    }

    String get(String key) {
        String v = values.get(key);
        if (v == null) {
            throw new IllegalArgumentException("missing --" + key);
        }
        return v;
    }

    String get(String key, String fallback) {
        return values.getOrDefault(key, fallback);
    }

    int getInt(String key, int fallback) {
        return values.containsKey(key) ? Integer.parseInt(values.get(key)) : fallback;
    }

    long getLong(String key, long fallback) {
        return values.containsKey(key) ? Long.parseLong(values.get(key)) : fallback;
    }

    double getDouble(String key, double fallback) {
        return values.containsKey(key) ? Double.parseDouble(values.get(key)) : fallback;
    }

    boolean flag(String key) {
        return Boolean.parseBoolean(values.getOrDefault(key, "false"));
    }

    /** ACL 2.0: {@code --access-key AK --secret-key SK} sign every request ({@code AclClientRPCHook}); else none. */
    RPCHook rpcHook() {
        if (!values.containsKey("access-key")) {
            return null;
        }
        return new AclClientRPCHook(new SessionCredentials(get("access-key"), get("secret-key")));
    }
}
