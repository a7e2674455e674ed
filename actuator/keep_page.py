"""The "keep my job" page: GET /keep/<link> shows the case, its evidence and deadline, with
buttons to keep it for 1 h / 4 h / 24 h (bounded by `notifier.keep_max`) or release it now;
POST acts once per link. The link is the only credential (no token, no cookie): its
signature, age, single use and the form's CSRF value are checked before anything changes,
and every action is audited with the link's identity (case, nonce) and the case's owner."""

from __future__ import annotations

import contextlib
from typing import Any

import jinja2
from flask import Blueprint, Response, request

from actuator import owner_actions
from actuator.audit import AuditError
from actuator.audit_records import KeepLinkUsed
from actuator.evidence.links import PictureRef
from actuator.keeplinks import KeepLinks, LinkError
from actuator.models import Case, State
from actuator.notifications import untrusted
from actuator.notifications.messages import BUILTIN_TEMPLATES, size
from actuator.notifications.notice import ProvenFacts
from actuator.operations import HTTP_STATUS, Refused
from actuator.owner_actions import Owner
from actuator.runtime import Runtime
from actuator.store import StoreUnavailable
from actuator.suspension import RESTORE_ATTEMPTS

KEEP_HOURS = (1, 4, 24)
TEXT: dict[str, dict[str, Any]] = {
    "zh-CN": {
        "title": "保留 GPU 任务",
        "case": "工单号",
        "process": "进程",
        "where": "位置",
        "memory": "占用显存",
        "owner": "所有者",
        "state": "状态",
        "why": "依据",
        "choose": "如任务仍在进行，请选择保留时长；如已不需要，可立即释放 GPU。",
        "keep_for": "保留 {} 小时",
        "release": "立即释放",
        "deadline": "若无操作，将于 {}（{}后）发送 SIGTERM。",
        "on_demand": "暂不处理：只有当有人需要这块 GPU 时才会回收，届时会再通知您。",
        "minutes": "{} 分钟",
        "now": "即将",
        "restore": "恢复",
        "restore_asked": "已请求：下一步即恢复到原 GPU 或同型号的其他 GPU",
        "restore_waiting": "已请求，排在队首等待原 GPU 或同型号 GPU 有空间：{} 再查看"
        "（空间不足的 GPU 不会尝试恢复）",
        "restore_refused": "已请求，驱动拒绝了恢复：{} 再试（第 {} 次，共 {} 次），仍不行则停止",
        "states": {
            "pending": "已标记，正在复核",
            "notified": "已通知，宽限期中",
            "idle_until_demand": "已通知：空闲，有人需要这块 GPU 时才会回收",
            "snoozed": "已保留",
            "deferred": "暂缓处理",
            "terminating": "正在停止（已发送 SIGTERM）",
            "killing": "正在强制停止（已发送 SIGKILL）",
            "suspending": "正在挂起（GPU 状态存入内存）",
            "suspended": "已挂起：GPU 已释放，进程与数据保留；保留即恢复",
            "resuming": "正在恢复到 GPU",
            "reclaimed": "已回收",
            "cancelled": "未处理（任务恢复活动或已退出）",
            "refused": "未处理（无法确认空闲）",
            "observed": "仅观察，未处理",
            "failed": "回收失败，运维已收到告警",
        },
        "kept": "已保留到 {}。感谢确认！",
        "released": "已确认释放，GPU 将很快回收。",
        "idle": "无 SM 计算、进程树 CPU 空闲、无日志或心跳写入",
        "stalled": "心跳和日志不再更新（GPU 利用率可能显示 100%）",
        "closed": "该工单已是“{}”状态，不能再保留。",
        "used": "此链接已使用过（{}）。",
        "csrf": "表单已失效，请从通知中的链接重新打开本页。",
        "evidence": "规则所见：SM 利用率、显存、进程树 CPU、心跳与日志"
        "（虚线为空闲阈值，阴影为判定空闲的时段）",
    },
    "en": {
        "title": "Keep a GPU job",
        "case": "Case",
        "process": "Process",
        "where": "Where",
        "memory": "GPU memory held",
        "owner": "Owner",
        "state": "State",
        "why": "Why",
        "choose": "If the job is still working, choose how long to keep it; if you are done, "
        "release the GPU now.",
        "keep_for": "Keep for {} h",
        "release": "Release now",
        "deadline": "Unless you act: SIGTERM at {} (in {}).",
        "on_demand": "Nothing happens yet: it is reclaimed only when someone needs this GPU, "
        "and you will be told then.",
        "minutes": "{} min",
        "now": "moments",
        "restore": "Resume",
        "restore_asked": "asked: it is restored onto its GPU, or another of the same chip, at "
        "the next step",
        "restore_waiting": "asked, first in line for room on its GPU or another of its chip: "
        "looked at again at {} (a GPU without room is never tried)",
        "restore_refused": "asked, the driver refused the restore: tried again at {} (try {} of "
        "{}), then stopped if it still refuses",
        "states": {
            "pending": "flagged, being re-checked",
            "notified": "warned: in its grace period",
            "idle_until_demand": "told: idle, kept until someone needs the GPU",
            "snoozed": "kept",
            "deferred": "held back for now",
            "terminating": "being stopped (SIGTERM sent)",
            "killing": "being stopped by force (SIGKILL sent)",
            "suspending": "being suspended (its GPU state saved to memory)",
            "suspended": "suspended: the GPU is free, the process and its work kept; keep it "
            "to resume it",
            "resuming": "being restored onto its GPU",
            "reclaimed": "reclaimed",
            "cancelled": "left alone (working again, or it exited)",
            "refused": "left alone (idleness could not be proven)",
            "observed": "observed only, nothing done",
            "failed": "the GPU could not be freed; the SREs were alerted",
        },
        "kept": "Kept until {}. Thank you!",
        "released": "Release confirmed: the GPU will be reclaimed shortly.",
        "idle": "no SM work, an idle process tree, no log or heartbeat writes",
        "stalled": "its heartbeat and log stopped moving (utilisation may read 100 %)",
        "closed": "This case is {} now: it can no longer be kept.",
        "used": "This link was already used ({}).",
        "csrf": "This form has expired: open the page again from the link in your notice.",
        "evidence": "What the rule saw: SM utilisation, memory, process-tree CPU, heartbeat and "
        "log writes (dashed: the idle thresholds; shaded: where the rule held)",
    },
}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",  # the link is a credential: never leak it onward
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
NOTIFIED_OR_SNOOZED = {State.NOTIFIED, State.SNOOZED, State.PENDING, State.DEFERRED}


def language() -> str:
    asked = request.args.get("lang") or request.accept_languages.best_match(["zh-CN", "zh", "en"])
    return "zh-CN" if (asked or "").lower().startswith("zh") else "en"


def keep_blueprint(rt: Runtime, links: KeepLinks, keep_max: float) -> Blueprint:
    """The page; a keep is the API's own snooze, a release the same release as on the node
    (actuator/operations.py)."""
    page = Blueprint("keep", __name__)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(BUILTIN_TEMPLATES)), autoescape=True
    )
    template = env.get_template("keep.html.j2")
    hours = tuple(h for h in KEEP_HOURS if h * 3600 <= keep_max) or (int(keep_max // 3600),)

    def offered(case: Case) -> tuple[int, ...]:
        """The buttons this case's owner may use: those the owner's door would accept (the
        site's keep_max, the case's rule's bounds and repeat step)."""
        return tuple(h for h in hours if may_keep(case, h) is None)

    def may_keep(case: Case, keep_hours: int) -> Refused | None:
        return owner_actions.may_keep(
            Owner("keep link"), keep_hours * 3600.0, case=case, site_max=keep_max
        )

    def render(
        status: int,
        lang: str,
        case: Case | None = None,
        token: str = "",
        problem: str = "",
        done: str = "",
    ) -> tuple[Response, int]:
        t = TEXT[lang]
        values: dict[str, object] = {
            "lang": lang,
            "t": t,
            "problem": problem,
            "done": done,
            "case": case,
        }
        if case is not None:
            deadline = ""
            on_demand = (case.effective or {}).get("reclaim_when") == "demand"
            start = case.demand_at if on_demand else case.notified_at
            waits_for_demand = case.state == State.NOTIFIED and on_demand and start is None
            if waits_for_demand:
                deadline = t["on_demand"]
            elif case.state == State.NOTIFIED and case.term_at is None and start:
                grace = (case.effective or {}).get("grace", 0) + case.notice_extra_grace
                at = start + grace
                left = round(max(0.0, at - rt.clock()) / 60)
                deadline = t["deadline"].format(
                    _local(at), t["minutes"].format(left) if left else t["now"]
                )
            facts = ProvenFacts.of_case(case)
            buttons = offered(case)
            values |= {
                # What the node proved (never the alert's claims); autoescaped HTML.
                "command": untrusted.plain(facts.cmdline or facts.program, 300) if facts else "?",
                "gpu": facts.gpu if facts else "?",
                "memory": size(
                    (facts.memory_bytes if facts else None) or case.gpu_memory_bytes or 0
                ),
                "why": t["stalled" if "Stalled" in case.alertname else "idle"],
                "deadline": deadline,
                "csrf": links.csrf(token),
                "keep_hours": buttons,
                # No button offered: the door's own reason, not a silent page.
                "keep_refused": "" if buttons else _detail(may_keep(case, hours[0])),
                # No grace runs until someone waits: the State row says what the page says.
                "state": t["states"]["idle_until_demand"]
                if waits_for_demand
                else t["states"].get(str(case.state), str(case.state)),
                # A resume asked: where it stands (the GPU may have no room yet).
                "restore": restore_status(case, t),
                "can_act": case.state in NOTIFIED_OR_SNOOZED and not done,
                "can_release": case.state == State.NOTIFIED,
                "picture": picture_src(case.id),
            }
        response = Response(template.render(values), status=status, mimetype="text/html")
        response.headers.update(SECURITY_HEADERS)
        return response, status

    def restore_status(case: Case, t: dict[str, Any]) -> str:
        if case.state != State.SUSPENDED or case.resume_requested_mono is None:
            return ""
        at = _local(rt.clock() + max(0.0, case.resume_requested_mono - rt.mono()))
        if case.restore_attempts:
            return str(t["restore_refused"]).format(at, case.restore_attempts + 1, RESTORE_ATTEMPTS)
        if case.restore_waits:
            return str(t["restore_waiting"]).format(at)
        return str(t["restore_asked"])

    def picture_src(case_id: int) -> str:
        """The case's latest evidence picture, relative to this page (/keep/<token>), so it
        resolves under whatever path the public URL puts the actuator."""
        if rt.pictures is None:
            return ""
        try:
            latest = rt.store.latest_picture(case_id)
        except StoreUnavailable:
            return ""
        return ".." + rt.pictures.path(PictureRef(case_id, latest)) if latest else ""

    def load(token: str, lang: str) -> tuple[Case | None, str, tuple[Response, int] | None]:
        try:
            claim = links.verify(token)
        except LinkError as exc:
            return None, "", render(403, lang, problem=str(exc))
        case = rt.store.get_case(claim.case_id)
        if case is None:
            return None, "", render(404, lang, problem=f"no case {claim.case_id}")
        used = rt.store.keep_link_use(claim.nonce)
        if used is not None:
            problem = TEXT[lang]["used"].format(f"{used[1]}, {_local(used[0])}")
            return case, claim.nonce, render(409, lang, case, token, problem=problem)
        return case, claim.nonce, None

    @page.get("/keep/<token>")
    def show(token: str) -> tuple[Response, int]:
        lang = language()
        case, _, refused = load(token, lang)
        if refused is not None:
            return refused
        assert case is not None
        if case.state not in NOTIFIED_OR_SNOOZED:
            return render(200, lang, case, token, problem=TEXT[lang]["closed"].format(case.state))
        return render(200, lang, case, token)

    @page.post("/keep/<token>")
    def act(token: str) -> tuple[Response, int]:
        lang = language()
        t = TEXT[lang]
        case, nonce, refused = load(token, lang)
        if refused is not None:
            return refused
        assert case is not None
        origin = request.headers.get("Origin")
        ours = {request.host_url.rstrip("/"), links.origin}  # direct, or behind its proxy
        if not links.check_csrf(token, request.form.get("csrf", "")) or (
            origin not in (None, "null") and origin not in ours
        ):
            return render(403, lang, case, token, problem=t["csrf"])
        action = request.form.get("action", "")
        try:
            keep_hours = int(request.form.get("hours", "0"))
        except ValueError:
            keep_hours = 0
        if action == "keep" and keep_hours not in offered(case):
            refusal = may_keep(case, keep_hours) if keep_hours in hours else None
            problem = refusal.detail if refusal else f"hours must be one of {offered(case)}"
            return render(422, lang, case, token, problem=problem)
        if action not in ("keep", "release"):
            return render(422, lang, case, token, problem="unknown action")
        if action == "release" and case.state != State.NOTIFIED:
            return render(409, lang, case, token, problem=t["closed"].format(case.state))
        if case.state not in NOTIFIED_OR_SNOOZED:
            return render(409, lang, case, token, problem=t["closed"].format(case.state))
        who = f"keep link {nonce[:8]} (owner {case.user})"
        try:
            if not rt.store.use_keep_link(nonce, case.id, rt.clock(), action):
                return render(409, lang, case, token, problem=t["used"].format(action))
            rt.audit.write(
                KeepLinkUsed(
                    case=case.id,
                    action=action,
                    hours=keep_hours if action == "keep" else None,
                    link=nonce,
                    owner=case.user,
                )
            )
        except (AuditError, StoreUnavailable) as exc:
            return render(503, lang, case, token, problem=str(exc))
        owner = Owner(who)
        if action == "keep":
            kept = owner_actions.keep(rt, owner, keep_hours * 3600.0, case=case, site_max=keep_max)
            if isinstance(kept, Refused):
                return render(HTTP_STATUS[kept.why], lang, case, token, problem=kept.detail)
            return render(
                200,
                lang,
                rt.store.get_case(case.id),
                token,
                done=t["kept"].format(_local(kept.until)),
            )
        released = owner_actions.release(rt, owner, case=case, process=None)
        if isinstance(released, Refused):
            return render(409, lang, case, token, problem=t["closed"].format(case.state))
        return render(200, lang, rt.store.get_case(case.id), token, done=t["released"])

    return page


def _detail(refused: Refused | None) -> str:
    return refused.detail if refused is not None else ""


def _local(ts: float) -> str:
    """In the owner's time zone when the link says it (`?tz=`, added with `?lang=` by the
    notice; display only), else the actuator's."""
    from datetime import datetime
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    zone: Any = None
    with contextlib.suppress(ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo(request.args.get("tz", "")) if request.args.get("tz") else None
    return datetime.fromtimestamp(ts, zone).astimezone(zone).strftime("%Y-%m-%d %H:%M %Z")
