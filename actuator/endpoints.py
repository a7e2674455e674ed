"""HTTP sessions for the endpoints the actuator posts to (chat robots, the JSON webhook,
Alertmanager).

requests reads the environment again for every request: the proxy variables and NO_PROXY,
the CA bundle variables, ~/.netrc. For a notice that was a tenth of its CPU. The actuator's
environment does not change while it runs, so a session for one endpoint reads them once,
when it is made, and then posts with exactly those settings.
"""

from __future__ import annotations

import requests
from requests.utils import get_netrc_auth


def session_for(url: str) -> requests.Session:
    """A session for posting to `url` (any path or query on its scheme and host) with the
    environment's settings for it read now."""
    session = requests.Session()
    settings = session.merge_environment_settings(url, {}, None, None, None)
    session.proxies = dict(settings["proxies"])
    session.verify = settings["verify"]
    session.auth = get_netrc_auth(url)
    session.trust_env = False
    return session
