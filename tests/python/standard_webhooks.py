"""The Standard Webhooks reference library, for tests/webhooks.rs.

    verify SECRET BODY_FILE HEADERS_JSON  -> prints the verified payload
    sign SECRET MSG_ID BODY_FILE          -> prints the headers to send (JSON)
"""

import datetime
import json
import sys

from standardwebhooks import Webhook


def main() -> None:
    mode, secret = sys.argv[1], sys.argv[2]
    hook = Webhook(secret)
    if mode == "verify":
        body = open(sys.argv[3], "rb").read()
        headers = json.loads(sys.argv[4])
        print(json.dumps(hook.verify(body, headers)))
    elif mode == "sign":
        msg_id = sys.argv[3]
        body = open(sys.argv[4], "rb").read().decode()
        now = datetime.datetime.now(tz=datetime.timezone.utc)
        print(
            json.dumps(
                {
                    "webhook-id": msg_id,
                    "webhook-timestamp": str(int(now.timestamp())),
                    "webhook-signature": hook.sign(msg_id, now, body),
                }
            )
        )
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
