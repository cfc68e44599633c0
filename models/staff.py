"""The console's staff: users, their memberships in clinics, sessions, set-password links
and two-factor recovery codes."""

from __future__ import annotations

import uuid
from typing import Any

import peewee as pw

from models.base import BaseModel
from models.clinics import Clinic
from plumbing.clock import utc_now


class StaffUser(BaseModel):
    """A clinic employee who logs in to the staff console with a password (never to the
    API). Disabled, not deleted: the audit trail names who wrote."""

    LANGUAGES = ("cs", "en")  # Czech first: the clinics are Czech

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    email = pw.CharField(max_length=254, unique=True)  # stored lower case (`normal_email`)
    name = pw.CharField(max_length=200)
    password_hash = pw.TextField()  # Argon2id, staff.passwords
    language = pw.CharField(max_length=2, default="cs")
    created_at = pw.DateTimeField(default=utc_now)
    disabled_at = pw.DateTimeField(null=True)
    last_login_at = pw.DateTimeField(null=True)
    # Two-factor login (staff/two_factor.py): the TOTP secret encrypted with SECRET_KEY
    # (plumbing/crypto.py); set but not enabled while the user is enrolling. The last time
    # step a code was accepted for: a code is good once, even within its window.
    totp_secret_encrypted = pw.TextField(null=True)
    totp_enabled_at = pw.DateTimeField(null=True)
    totp_last_step = pw.BigIntegerField(null=True)

    # Whether the user administers a clinic, once known: the console's header asks on every
    # page, so the session's own query reads it (`staff.sessions.find`) and no render does.
    _admin: bool | None = None
    # Whether the user is a clinic's data-protection officer, and whether they work a clinic's
    # inbox (staff or admin), once known: read by the session's query like `_admin`.
    _officer: bool | None = None
    _works: bool | None = None
    # How many keys of the clinics the user administers expire within 14 days (the banner
    # of every page): counted by the session's query (`console.sessions.find`).
    expiring_keys: int = 0

    @property
    def two_factor(self) -> bool:
        return self.totp_enabled_at is not None

    @property
    def is_admin(self) -> bool:
        """Whether the user is an administrator of at least one clinic."""
        if self._admin is None:
            self._admin = self.administers().exists()
        return self._admin

    @property
    def is_officer(self) -> bool:
        """Whether the user is the data-protection officer of at least one clinic."""
        if self._officer is None:
            self._officer = (
                StaffMembership.select()
                .where((StaffMembership.user == self.id) & (StaffMembership.role == "officer"))
                .exists()
            )
        return self._officer

    @property
    def works(self) -> bool:
        """Whether the user works a clinic's inbox (staff or admin somewhere): an officer
        only has no inbox."""
        if self._works is None:
            self._works = (
                StaffMembership.select()
                .where((StaffMembership.user == self.id) & StaffMembership.role.in_(StaffMembership.WORKING_ROLES))
                .exists()
            )
        return self._works

    def administers(self) -> pw.ModelSelect[StaffMembership]:
        """The user's admin memberships (a query: `exists()` it, or select from it)."""
        return StaffMembership.select().where((StaffMembership.user == self.id) & (StaffMembership.role == "admin"))

    @staticmethod
    def normal_email(email: str) -> str:
        return email.strip().lower()

    @classmethod
    def by_email(cls, email: str) -> StaffUser | None:
        return cls.get_or_none(cls.email == cls.normal_email(email))

    def clinics(self, role: str | tuple[str, ...] | None = None) -> list[Clinic]:
        """The clinics of the user's memberships (only those with `role`, or one of the
        roles, when given), by name."""
        query = Clinic.select().join(StaffMembership).where(StaffMembership.user == self)
        if isinstance(role, str):
            query = query.where(StaffMembership.role == role)
        elif role is not None:
            query = query.where(StaffMembership.role.in_(role))
        return list(query.order_by(Clinic.name, Clinic.slug))

    def role_in(self, clinic: Clinic) -> str | None:
        """`staff`, `admin`, `officer`, or None when the user does not work for the clinic."""
        membership = StaffMembership.get_or_none(StaffMembership.user == self, StaffMembership.clinic == clinic)
        return membership.role if membership else None

    def two_factor_required(self) -> bool:
        """Whether a clinic the user works for requires a second factor at login."""
        return (
            Clinic.select()
            .join(StaffMembership)
            .where((StaffMembership.user == self) & Clinic.two_factor_required)
            .exists()
        )


class StaffMembership(BaseModel):
    """Which clinics a staff user works for, and as what: `staff` (the inbox), `admin`
    (the inbox and the clinic's settings, team, keys, audit and read trails, patients'
    copies and erasures) or `officer`, the data-protection officer (pověřenec): the audit
    and read trails, patients' pages, copies and erasures, and no inbox, request, recording
    or setting."""

    id: Any  # the AutoField: a column in queries, an int on a row
    user_id: uuid.UUID
    clinic_id: uuid.UUID

    ROLES = ("staff", "admin", "officer")
    #: The roles that open the clinic's inbox and its requests.
    WORKING_ROLES = ("staff", "admin")

    user = pw.ForeignKeyField(StaffUser, backref="memberships", on_delete="CASCADE")
    clinic = pw.ForeignKeyField(Clinic, backref="staff", on_delete="CASCADE")
    role = pw.CharField(max_length=8, default="staff")
    # The user asked (account page) to be e-mailed of this clinic's messages flagged
    # "may be urgent", when the clinic tells its staff (notices/urgent.py).
    urgent_notices = pw.BooleanField(default=False)

    class Meta:
        indexes = ((("user", "clinic"), True),)


class StaffSession(BaseModel):
    """A console login, held server-side. The cookie carries a random token; only its
    SHA-256 is stored (the id), so a database dump opens no session. Logging out or
    disabling the user deletes the row, which ends the session at once."""

    user_id: uuid.UUID

    id = pw.CharField(max_length=64, primary_key=True)  # sha256 hex of the cookie's token
    user = pw.ForeignKeyField(StaffUser, backref="sessions", on_delete="CASCADE")
    created_at = pw.DateTimeField()
    last_seen_at = pw.DateTimeField()
    csrf_token = pw.CharField(max_length=64)
    ip = pw.CharField(max_length=64, null=True)
    user_agent = pw.CharField(max_length=300, null=True)
    # A login half done: None = logged in; "code" = the password was right, the second factor
    # is awaited; "enrol" = the password was right, and a clinic requires two-factor the user
    # has not enrolled yet. Such a session opens only the page that finishes the login.
    pending = pw.CharField(max_length=8, null=True)


class StaffPasswordLink(BaseModel):
    """A one-time link that lets a staff user choose a password (a new account, or a reset
    an admin made, or "forgot password"): handed over by the admin, or e-mailed. Only the
    SHA-256 of its token is stored; it is good once, until `expires_at`."""

    user_id: uuid.UUID

    id = pw.UUIDField(primary_key=True, default=uuid.uuid4)
    user = pw.ForeignKeyField(StaffUser, backref="password_links", on_delete="CASCADE")
    token_hash = pw.CharField(max_length=64, unique=True)
    created_at = pw.DateTimeField()
    expires_at = pw.DateTimeField()
    used_at = pw.DateTimeField(null=True)


class StaffRecoveryCode(BaseModel):
    """A two-factor recovery code (shown once at enrolment), stored as its SHA-256; good once."""

    id: Any
    user_id: uuid.UUID

    user = pw.ForeignKeyField(StaffUser, backref="recovery_codes", on_delete="CASCADE")
    code_hash = pw.CharField(max_length=64)
    used_at = pw.DateTimeField(null=True)

    class Meta:
        indexes = ((("user", "code_hash"), True),)
