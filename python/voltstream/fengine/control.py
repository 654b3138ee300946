"""katcp control of the F-engine: gains, delay models, capture on/off and sensors.

``FEngineControl`` runs an ``aiokatcp.DeviceServer`` in a thread of its own (with
its own asyncio event loop). The requests follow MeerKAT's CBF conventions, without
the stream name (one engine, one stream):

``?gain <pol> [value...]``
    set the complex gains of polarisation 0 or 1: one value for every channel, or
    ``nchan`` values, one per channel, written like ``1.5+0.2j``, ``2`` or ``-0.5j``.
    Without values it only queries. The reply carries the gains as they will be
    once the queued changes are applied: one value when all channels are equal,
    else ``nchan`` values.
``?gain-all <value>...`` / ``?gain-all default``
    the same for both polarisations at once; ``default`` restores gain 1.
``?delays <start-sample> <pol0-model> <pol1-model>``
    a model per polarisation, ``delay,delay_rate:phase,phase_rate`` (s, s/s, rad,
    rad/s); ``start-sample`` is the digitiser sample count the model is referred
    to (``DelayModel.epoch_sample``).
``?capture-start`` / ``?capture-stop``
    set / clear the ``capturing`` event (set at start-up).

Threads: a request handler never touches the engine. It validates its arguments
(anything wrong replies ``fail`` and changes nothing), then queues the change; the
pipeline thread calls ``apply_pending(engine)`` between blocks, which applies the
queued changes in arrival order. The latest gains and delay models are mirrored
here, so queries need no engine. ``update_sensors`` may be called from any thread.

``load_settings`` reads initial gains and delay models from a TOML file; queue them
with ``queue_gains`` / ``queue_delay_models`` so that the mirror matches the engine.
docs/fengine.md ("Control (katcp)") describes the formats.

(Over 500 lines for one concept: one katcp device server, its requests and sensors,
and the settings file they share; each request handler is short and they share the
server's state.)
"""

# No ``from __future__ import annotations`` here: aiokatcp reads the annotations of
# the request handlers at class creation to decode the arguments, and needs types.

import asyncio
import logging
import math
import numbers
import os
import re
import threading
import time
import tomllib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiokatcp
import numpy as np
import numpy.typing as npt

from voltstream import __version__
from voltstream.capture.run import COUNTER_NAMES
from voltstream.dsp.delay import DelayModel
from voltstream.errors import ConfigError
from voltstream.fengine.plan import NPOL

__all__ = [
    "FENGINE_COUNTERS",
    "FEngineControl",
    "format_complex",
    "load_settings",
    "parse_delay_model",
    "parse_gains",
]

logger = logging.getLogger(__name__)

# Sensors that exist from start-up (integer, status "unknown" until the first
# update_sensors): the F-engine's counters and the capture engine's.
FENGINE_COUNTERS = (
    "spectra",
    "heaps_made",
    "heaps_skipped",
    "flagged_spectra",
    "saturated_pol0",
    "saturated_pol1",
)
_SENSOR_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
# Delay models are refused beyond these: a coarse delay must stay far inside int64
# sample arithmetic, and a delay changing faster than time itself is meaningless.
MAX_DELAY_SAMPLES = 2**48
MAX_DELAY_RATE = 1.0
_MODEL_FIELDS = ("delay_s", "delay_rate", "phase_rad", "phase_rate_rad_s", "epoch_sample")


# ---------------------------------------------------------------------------
# Parsing and formatting (shared by the katcp requests and load_settings)


def _parsed(kind: Callable[[str], Any], text: str, what: str) -> Any:
    """``kind(text)``, or a ConfigError saying the text is not ``what``."""
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"{text!r} is not {what}") from None


def parse_complex(text: str) -> complex:
    """One finite complex number written like ``1.5+0.2j``, ``2`` or ``-0.5j``."""
    value: complex = _parsed(complex, text, "a complex number: write it like 1.5+0.2j, 2 or -0.5j")
    if not (math.isfinite(value.real) and math.isfinite(value.imag)):
        raise ConfigError(f"gain {text} is not finite: give a finite complex number")
    return value


def parse_gains(values: Sequence[str], nchan: int) -> np.ndarray:
    """``(nchan,)`` complex128 gains from one value (every channel) or ``nchan`` values."""
    if len(values) not in (1, nchan):
        raise ConfigError(
            f"{len(values)} gain values: give one (for every channel) or {nchan} (one per channel)"
        )
    gains = np.array([parse_complex(v) for v in values], dtype=np.complex128)
    return np.array(np.broadcast_to(gains, (nchan,)))


def format_complex(value: complex) -> str:
    """``1.5+0.2j``: what ``complex()`` reads back exactly (shortest round-trip floats)."""
    z = complex(value)
    return f"{float(z.real)}{float(z.imag):+}j"


def _format_gains(gains: np.ndarray) -> tuple[str, ...]:
    """One value when every channel has the same gain, else one per channel."""
    if np.all(gains == gains[0]):
        return (format_complex(gains[0]),)
    return tuple(format_complex(g) for g in gains)


def _parse_pol(text: str) -> int:
    if text not in ("0", "1"):
        raise ConfigError(f"polarisation {text!r} does not exist: use 0 or 1")
    return int(text)


def parse_sample_count(text: str) -> int:
    """A digitiser sample count: a whole number, 0 <= n < 2^63."""
    value: int = _parsed(
        int,
        text,
        "a whole number: give the digitiser sample count at which the model is referred "
        "(the epoch of the delay model) as the start time",
    )
    if not 0 <= value < 2**63:
        raise ConfigError(f"start time {value} is out of range: give a sample count >= 0")
    return value


def parse_delay_model(text: str, epoch_sample: int) -> DelayModel:
    """``delay,delay_rate:phase,phase_rate`` (s, s/s, rad, rad/s) -> ``DelayModel``."""
    halves = text.split(":")
    pairs = [h.split(",") for h in halves]
    if len(halves) != 2 or any(len(p) != 2 for p in pairs):
        raise ConfigError(
            f"delay model {text!r}: write it as delay,delay_rate:phase,phase_rate "
            "(seconds, seconds per second, radians, radians per second)"
        )
    names = ("delay", "delay_rate", "phase", "phase_rate")
    numbers_ = []
    for name, item in zip(names, pairs[0] + pairs[1], strict=True):
        try:
            value = float(item)
        except ValueError:
            raise ConfigError(f"delay model {text!r}: {name} {item!r} is not a number") from None
        if not math.isfinite(value):
            raise ConfigError(f"delay model {text!r}: {name} {item} is not finite")
        numbers_.append(value)
    delay, rate, phase, phase_rate = numbers_
    return DelayModel(delay, rate, phase, phase_rate, epoch_sample=epoch_sample)


def check_delay_model(model: DelayModel, sample_rate_hz: float) -> None:
    """Refuses models the engine cannot evaluate sensibly (see the module constants)."""
    if not isinstance(model, DelayModel):
        raise ConfigError("delay models must be voltstream.dsp.delay.DelayModel instances")
    if not abs(model.delay_s) * sample_rate_hz < MAX_DELAY_SAMPLES:
        raise ConfigError(
            f"delay {model.delay_s} s is {model.delay_s * sample_rate_hz:.3g} samples: "
            f"give less than 2^48 samples in magnitude"
        )
    if not abs(model.delay_rate) < MAX_DELAY_RATE:
        raise ConfigError(
            f"delay rate {model.delay_rate} s/s: give |delay_rate| < 1 (seconds per second)"
        )
    if not 0 <= int(model.epoch_sample) < 2**63:
        raise ConfigError(f"epoch_sample={model.epoch_sample}: give a sample count >= 0")


# ---------------------------------------------------------------------------
# The katcp device server


def _fail(error: ConfigError) -> aiokatcp.FailReply:
    return aiokatcp.FailReply(str(error))


class _ControlServer(aiokatcp.DeviceServer):
    VERSION = "voltstream-fengine-1.0"
    BUILD_STATE = f"voltstream-{__version__}"

    def __init__(self, control: "FEngineControl", host: str, port: int, loop: Any) -> None:
        super().__init__(host, port, loop=loop)
        self._control = control

    async def request_gain(self, ctx: Any, *args: str) -> tuple[str, ...]:
        """Set or query one polarisation's gains: ?gain <pol> [value...].

        pol is 0 or 1. One complex value (like 1.5+0.2j) sets every channel; nchan
        values set one channel each; no value queries. The reply lists the gains as
        they stand once queued changes are applied: one value if all channels are
        equal, else one per channel.
        """
        try:
            return self._control._request_gain(args)
        except ConfigError as error:
            raise _fail(error) from None

    async def request_gain_all(self, ctx: Any, *args: str) -> None:
        """Set the gains of both polarisations: ?gain-all <value>... | ?gain-all default.

        One complex value sets every channel, nchan values one channel each;
        'default' restores gain 1.
        """
        try:
            self._control._request_gain_all(args)
        except ConfigError as error:
            raise _fail(error) from None

    async def request_delays(self, ctx: Any, *args: str) -> None:
        """Load delay models: ?delays <start-sample> <pol0-model> <pol1-model>.

        Each model is delay,delay_rate:phase,phase_rate (s, s/s, rad, rad/s),
        referred to start-sample, a digitiser sample count. Applied from the next
        heap the engine processes after the change is picked up.
        """
        try:
            self._control._request_delays(args)
        except ConfigError as error:
            raise _fail(error) from None

    async def request_capture_start(self, ctx: Any) -> None:
        """Start sending output heaps (sets the capturing event)."""
        self._control.capturing.set()
        logger.info("capture-start: output enabled")

    async def request_capture_stop(self, ctx: Any) -> None:
        """Stop sending output heaps (clears the capturing event)."""
        self._control.capturing.clear()
        logger.info("capture-stop: output disabled")


# ---------------------------------------------------------------------------
# The controller


def _check_engine_settings(settings: Mapping[str, Any]) -> tuple[int, float]:
    if not isinstance(settings, Mapping):
        raise ConfigError("engine_settings must be a dict with nchan and sample_rate_hz")
    for key in ("nchan", "sample_rate_hz"):
        if key not in settings:
            raise ConfigError(f"engine_settings lacks {key!r}: give nchan and sample_rate_hz")
    nchan = settings["nchan"]
    if isinstance(nchan, bool) or not isinstance(nchan, numbers.Integral) or nchan < 1:
        raise ConfigError(f"engine_settings nchan={nchan!r}: give a positive whole number")
    fs = settings["sample_rate_hz"]
    if (
        isinstance(fs, bool)
        or not isinstance(fs, numbers.Real)
        or not (math.isfinite(float(fs)) and float(fs) > 0)
    ):
        raise ConfigError(f"engine_settings sample_rate_hz={fs!r}: give a positive number")
    n_pols = settings.get("n_pols", NPOL)
    if n_pols != NPOL:
        raise ConfigError(f"engine_settings n_pols={n_pols!r}: the F-engine has {NPOL}")
    return int(nchan), float(fs)


class FEngineControl:
    """katcp control of one F-engine; see the module docstring.

    ``engine_settings``: ``nchan`` (int), ``sample_rate_hz`` (float), ``n_pols``
    (2, optional); other keys are ignored. ``port=0`` picks a free port
    (``address`` tells which once started).
    """

    def __init__(self, engine_settings: dict, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.nchan, self.sample_rate_hz = _check_engine_settings(engine_settings)
        self.host = str(host)
        self.port = int(port)
        #: Set while output heaps should be sent; ?capture-start / ?capture-stop.
        self.capturing = threading.Event()
        self.capturing.set()
        self._lock = threading.Lock()
        # Guarded by _lock: the queue, the mirror, the sensor registry, the loop.
        self._pending: deque[tuple[str, int | None, Any]] = deque()
        self._gains = np.ones((NPOL, self.nchan), dtype=np.complex128)
        self._delay_models = [DelayModel(), DelayModel()]
        self._sensor_types: dict[str, type] = dict.fromkeys(FENGINE_COUNTERS + COUNTER_NAMES, int)
        self._sensor_values: dict[str, tuple[type, int | float, float]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: _ControlServer | None = None
        self._thread: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self._address: tuple[str, int] | None = None

    # -- server life cycle --------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the server listens on: the real port once started."""
        if self._address is None:
            return (self.host, self.port)
        return self._address

    def start(self) -> None:
        """Starts the katcp server thread; returns once it listens."""
        if self._thread is not None:
            raise RuntimeError("FEngineControl is already started")
        ready = threading.Event()
        self._start_error = None
        thread = threading.Thread(
            target=self._run, args=(ready,), name="fengine-katcp", daemon=True
        )
        self._thread = thread
        thread.start()
        ready.wait()
        if self._start_error is not None:
            thread.join()
            self._thread = None
            error, self._start_error = self._start_error, None
            raise error

    def stop(self) -> None:
        """Shuts the server down and joins its thread; safe to call more than once."""
        with self._lock:
            loop, server = self._loop, self._server
            self._loop = self._server = None
        if loop is not None and server is not None:
            try:
                loop.call_soon_threadsafe(server.halt)
            except RuntimeError:  # the loop has closed already (?halt from a client)
                pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
            self._thread = None

    def __enter__(self) -> "FEngineControl":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve(loop, ready))
        except BaseException as error:
            if ready.is_set():
                logger.exception("katcp server stopped with an error")
            else:
                self._start_error = error
        finally:
            with self._lock:
                if self._loop is loop:
                    self._loop = self._server = None
            ready.set()
            try:
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                if tasks:
                    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    async def _serve(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        server = _ControlServer(self, self.host, self.port, loop)
        try:
            await server.start()
        except OSError as error:
            raise ConfigError(
                f"katcp server cannot listen on {self.host}:{self.port}: "
                f"{error.strerror or error}; choose another port (0 picks a free one)"
            ) from None
        host, port = server.sockets[0].getsockname()[:2]
        self._address = (str(host), int(port))
        # Snapshot and loop hand-over in one locked step: a later update_sensors
        # schedules its callback, which runs after this (synchronous) set-up.
        with self._lock:
            values = dict(self._sensor_values)
            types = dict(self._sensor_types)
            self._loop, self._server = loop, server
        for name, stype in types.items():
            self._ensure_sensor(server, name, stype)
        self._publish(server, [(name, *v) for name, v in values.items()])
        logger.info("F-engine katcp control listening on %s:%d", *self._address)
        ready.set()
        await server.join()

    # -- the queue ------------------------------------------------------------

    def queue_gains(self, pol: int | None, gains: npt.ArrayLike) -> None:
        """Queues new gains for ``pol`` (0, 1, or None for both).

        ``gains``: a complex scalar or ``(nchan,)``; for ``pol=None`` also
        ``(2, nchan)``. Refused (ConfigError) unless finite and of that shape.
        """
        g = np.asarray(gains, dtype=np.complex128)
        if not np.all(np.isfinite(g)):
            raise ConfigError("gains must be finite complex numbers")
        pols = (0, 1) if pol is None else (_parse_pol(str(pol)),)
        shape = (len(pols), self.nchan)
        if g.ndim > 1 and pol is not None:
            raise ConfigError(f"gains of shape {g.shape} for one polarisation: give (nchan,)")
        try:
            full = np.array(np.broadcast_to(g, shape))
        except ValueError:
            raise ConfigError(
                f"gains of shape {g.shape} do not fit {self.nchan} channels: give a scalar "
                "or one gain per channel"
            ) from None
        with self._lock:
            for i, p in enumerate(pols):
                self._gains[p] = full[i]
            if pol is None:
                self._pending.append(("gains", None, full))
            else:
                self._pending.append(("gains", pols[0], full[0]))
        logger.info("gains queued for pol %s", "0 and 1" if pol is None else pols[0])

    def queue_delay_models(self, models: Mapping[int, DelayModel]) -> None:
        """Queues delay models, ``{pol: DelayModel}``; all or none (ConfigError)."""
        checked = []
        for pol, model in models.items():
            p = _parse_pol(str(pol))
            check_delay_model(model, self.sample_rate_hz)
            checked.append((p, model))
        with self._lock:
            for p, model in checked:
                self._delay_models[p] = model
                self._pending.append(("delay", p, model))
        for p, model in checked:
            logger.info("delay model queued for pol %d: %s", p, model)

    def apply_pending(self, engine: Any) -> int:
        """Applies the queued changes to ``engine`` in order; returns how many.

        Call from the thread that runs the engine, between blocks. Each engine call
        counts one: ``?gain`` and ``?gain-all`` one, ``?delays`` two (a model per
        pol). If the engine refuses a change, the ones after it stay queued.
        """
        engine_nchan = getattr(engine, "nchan", self.nchan)
        if engine_nchan != self.nchan:
            raise ConfigError(
                f"engine has {engine_nchan} channels but its control was set up for "
                f"{self.nchan}: give FEngineControl the engine's nchan"
            )
        with self._lock:
            changes = list(self._pending)
            self._pending.clear()
        for done, (kind, pol, value) in enumerate(changes):
            try:
                if kind == "gains":
                    engine.set_gains(value, pol=pol)
                else:
                    engine.set_delay_model(pol, value)
            except BaseException:
                with self._lock:
                    self._pending.extendleft(reversed(changes[done + 1 :]))
                raise
        return len(changes)

    @property
    def pending(self) -> int:
        """How many changes wait for ``apply_pending``."""
        with self._lock:
            return len(self._pending)

    def gains(self, pol: int) -> np.ndarray:
        """The latest gains of ``pol`` (queued or applied), a copy."""
        p = _parse_pol(str(pol))
        with self._lock:
            return self._gains[p].copy()

    def delay_model(self, pol: int) -> DelayModel:
        """The latest delay model of ``pol`` (queued or applied)."""
        p = _parse_pol(str(pol))
        with self._lock:
            return self._delay_models[p]

    # -- request bodies (run on the server's loop; raise ConfigError) ---------

    def _request_gain(self, args: Sequence[str]) -> tuple[str, ...]:
        if not args:
            raise ConfigError("give the polarisation: ?gain <pol> [value...]")
        pol = _parse_pol(args[0])
        if len(args) > 1:
            self.queue_gains(pol, parse_gains(args[1:], self.nchan))
        return _format_gains(self.gains(pol))

    def _request_gain_all(self, args: Sequence[str]) -> None:
        if not args:
            raise ConfigError(
                f"give one gain (every channel), {self.nchan} gains (one per channel) "
                "or 'default': ?gain-all <value>..."
            )
        if tuple(args) == ("default",):
            gains = np.ones(self.nchan, dtype=np.complex128)
        else:
            gains = parse_gains(args, self.nchan)
        self.queue_gains(None, gains)

    def _request_delays(self, args: Sequence[str]) -> None:
        if len(args) != 1 + NPOL:
            raise ConfigError(
                f"{len(args)} arguments: give ?delays <start-sample> <pol0-model> <pol1-model>, "
                "each model delay,delay_rate:phase,phase_rate"
            )
        epoch = parse_sample_count(args[0])
        models = {}
        for pol, text in enumerate(args[1:]):
            try:
                models[pol] = parse_delay_model(text, epoch)
                check_delay_model(models[pol], self.sample_rate_hz)
            except ConfigError as error:
                raise ConfigError(f"pol {pol}: {error}") from None
        self.queue_delay_models(models)

    # -- sensors ----------------------------------------------------------------

    def update_sensors(self, counters: Mapping[str, int | float]) -> None:
        """Publishes ``counters`` as katcp sensors; any thread.

        A key gets an integer sensor (whole-number values) or a float sensor the
        first time it is seen; the F-engine and capture counters exist from the
        start. Values given before ``start`` are published when the server starts.
        A bad name or value refuses the whole update (ConfigError).
        """
        now = time.time()
        with self._lock:
            updates = []
            for key, value in counters.items():
                name = str(key)
                if not _SENSOR_NAME.match(name):
                    raise ConfigError(
                        f"counter name {name!r} is not a katcp sensor name: use letters, "
                        "digits, '_', '.' and '-', starting with a letter"
                    )
                stype = self._sensor_types.get(name)
                updates.append((name, *_sensor_reading(name, value, stype), now))
            for name, stype, value, stamp in updates:
                self._sensor_types[name] = stype
                self._sensor_values[name] = (stype, value, stamp)
            if self._loop is not None and self._server is not None:
                self._loop.call_soon_threadsafe(self._publish, self._server, updates)

    @staticmethod
    def _ensure_sensor(server: _ControlServer, name: str, stype: type) -> aiokatcp.Sensor:
        if name in server.sensors:
            return server.sensors[name]
        sensor: aiokatcp.Sensor = aiokatcp.Sensor(stype, name, f"F-engine counter {name}")
        server.sensors.add(sensor)
        return sensor

    def _publish(self, server: _ControlServer, updates: Any) -> None:
        """Sets sensor values; runs on the server's loop."""
        for name, stype, value, stamp in updates:
            sensor = self._ensure_sensor(server, name, stype)
            sensor.set_value(value, status=aiokatcp.Sensor.Status.NOMINAL, timestamp=stamp)


def _sensor_reading(name: str, value: Any, stype: type | None) -> tuple[type, int | float]:
    """(sensor type, value): integers stay integers, other reals make float sensors."""
    if isinstance(value, numbers.Integral):
        return (stype or int), (int(value) if stype in (None, int) else float(value))
    if isinstance(value, numbers.Real):
        if stype is int:
            raise ConfigError(f"counter {name}={value!r}: this sensor takes whole numbers")
        return float, float(value)
    raise ConfigError(f"counter {name}={value!r}: give an int or a float")


# ---------------------------------------------------------------------------
# Settings file


def _pol_of_key(path: Path, table: str, key: str) -> int:
    if key not in ("pol0", "pol1"):
        raise ConfigError(f"{path}: [{table}] has {key!r}: the keys are pol0 and pol1")
    return int(key[3])


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _toml_gain(path: Path, key: str, value: Any, nchan: int | None) -> complex | np.ndarray:
    def one(item: Any, where: str) -> complex:
        if _is_number(item):
            if not math.isfinite(item):
                raise ConfigError(f"{path}: [gains] {where} = {item} is not finite")
            return complex(item)
        if isinstance(item, str):
            try:
                return parse_complex(item)
            except ConfigError as error:
                raise ConfigError(f"{path}: [gains] {where}: {error}") from None
        raise ConfigError(
            f"{path}: [gains] {where} = {item!r}: give a number or a complex number as a "
            'string like "1.5+0.2j"'
        )

    if isinstance(value, list):
        if not value:
            raise ConfigError(f"{path}: [gains] {key} is an empty list: give one gain per channel")
        if nchan is not None and len(value) != nchan:
            raise ConfigError(
                f"{path}: [gains] {key} has {len(value)} gains: give one value or {nchan}"
            )
        return np.array([one(v, f"{key}[{i}]") for i, v in enumerate(value)], np.complex128)
    return one(value, key)


def _toml_delay(path: Path, key: str, table: Any) -> DelayModel:
    where = f"[delays.{key}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {where} must be a table of {', '.join(_MODEL_FIELDS)}")
    unknown = sorted(set(table) - set(_MODEL_FIELDS))
    if unknown:
        raise ConfigError(
            f"{path}: {where} has unknown keys {unknown}: the keys are {', '.join(_MODEL_FIELDS)}"
        )
    args = {}
    for name, value in table.items():
        if name == "epoch_sample":
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(
                    f"{path}: {where} epoch_sample = {value!r}: give a whole sample count >= 0"
                )
        elif not _is_number(value) or not math.isfinite(value):
            raise ConfigError(f"{path}: {where} {name} = {value!r}: give a finite number")
        args[name] = value
    try:
        model = DelayModel(**args)
        if abs(model.delay_rate) >= MAX_DELAY_RATE:
            raise ConfigError(f"delay_rate {model.delay_rate}: give |delay_rate| < 1 s/s")
    except ConfigError as error:
        raise ConfigError(f"{path}: {where}: {error}") from None
    return model


def load_settings(
    path: str | os.PathLike[str], *, nchan: int | None = None
) -> tuple[dict[int, np.ndarray | complex], dict[int, DelayModel]]:
    """Gains and delay models from a TOML file: ``({pol: gains}, {pol: DelayModel})``.

    ``[gains]``: ``pol0`` / ``pol1`` = a number, a complex number as a string
    (``"1.5+0.2j"``), or a list of those, one per channel (an array is returned
    then; ``nchan``, when given, checks its length). ``[delays.pol0]`` /
    ``[delays.pol1]``: ``delay_s``, ``delay_rate``, ``phase_rad``,
    ``phase_rate_rad_s``, ``epoch_sample`` (any left out are 0). A pol not in the
    file is not in the result. Other top-level tables are not read. A bad file
    raises ConfigError naming the file and what is wrong.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: settings file not found") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the settings file ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    gains: dict[int, np.ndarray | complex] = {}
    delays: dict[int, DelayModel] = {}
    gain_table = doc.get("gains", {})
    if not isinstance(gain_table, dict):
        raise ConfigError(f"{path}: gains must be a table: [gains] pol0 = ..., pol1 = ...")
    for key, value in gain_table.items():
        gains[_pol_of_key(path, "gains", key)] = _toml_gain(path, key, value, nchan)
    delay_table = doc.get("delays", {})
    if not isinstance(delay_table, dict):
        raise ConfigError(f"{path}: delays must be tables: [delays.pol0] delay_s = ...")
    for key, table in delay_table.items():
        delays[_pol_of_key(path, "delays", key)] = _toml_delay(path, key, table)
    return gains, delays
