"""katcp control of the F-engine: a real server on 127.0.0.1, a real aiokatcp client."""

import asyncio
import threading

import aiokatcp
import numpy as np
import pytest

from voltstream.dsp.delay import DelayModel
from voltstream.errors import ConfigError
from voltstream.fengine.control import FEngineControl, format_complex, load_settings
from voltstream.fengine.reference import FEngineReference

NCHAN = 16
FS = 1712e6
SETTINGS = {"nchan": NCHAN, "sample_rate_hz": FS, "n_pols": 2}


def small_engine(**kw) -> FEngineReference:
    return FEngineReference(NCHAN, 4, 4, sample_rate_hz=FS, **kw)


@pytest.fixture
def control():
    ctl = FEngineControl(SETTINGS, host="127.0.0.1", port=0)
    ctl.start()
    try:
        yield ctl
    finally:
        ctl.stop()


def katcp(control: FEngineControl, *requests):
    """Sends each (name, *args) over one connection; returns (ok, reply args, informs)."""

    async def run():
        client = await asyncio.wait_for(aiokatcp.Client.connect(*control.address), 5)
        try:
            out = []
            for name, *args in requests:
                reply, informs = await asyncio.wait_for(client.request_raw(name, *args), 5)
                fields = [a.decode() for a in reply.arguments]
                out.append((fields[0], fields[1:], informs))
            return out
        finally:
            client.close()
            await client.wait_closed()

    return asyncio.run(run())


def request(control, name, *args):
    return katcp(control, (name, *args))[0]


def test_server_listens_on_a_real_port_and_stops(control):
    host, port = control.address
    assert host == "127.0.0.1" and port > 0
    status, fields, _ = request(control, "watchdog")
    assert status == "ok"
    status, _, informs = request(control, "help")
    names = {m.arguments[0].decode() for m in informs}
    assert {"gain", "gain-all", "delays", "capture-start", "capture-stop"} <= names
    thread = control._thread
    control.stop()
    control.stop()  # idempotent
    assert not thread.is_alive()


def test_gain_set_query_and_apply(control):
    engine = small_engine()
    per_chan = [format_complex(complex(k, -k / 2)) for k in range(NCHAN)]
    replies = katcp(
        control,
        ("gain", "0", "1.5+0.2j"),
        ("gain", "0"),
        ("gain", "1", *per_chan),
        ("gain", "1"),
    )
    assert [r[0] for r in replies] == ["ok"] * 4
    assert replies[0][1] == ["1.5+0.2j"]
    assert replies[1][1] == ["1.5+0.2j"]
    assert replies[3][1] == per_chan
    # Nothing reaches the engine until the pipeline thread applies it.
    assert np.all(engine.gains == 1)
    assert control.pending == 2
    assert control.apply_pending(engine) == 2
    assert control.pending == 0
    np.testing.assert_array_equal(engine.gains[0], np.full(NCHAN, 1.5 + 0.2j))
    np.testing.assert_array_equal(engine.gains[1], np.arange(NCHAN) * (1 - 0.5j))
    assert control.apply_pending(engine) == 0


def test_gain_all_and_default(control):
    engine = small_engine()
    status, fields, _ = request(control, "gain-all", "2")
    assert (status, fields) == ("ok", [])
    assert control.apply_pending(engine) == 1
    np.testing.assert_array_equal(engine.gains, np.full((2, NCHAN), 2 + 0j))
    values = [str(k + 1) for k in range(NCHAN)]
    assert request(control, "gain-all", *values)[0] == "ok"
    assert request(control, "gain", "1")[1] == [format_complex(k + 1) for k in range(NCHAN)]
    assert request(control, "gain-all", "default")[0] == "ok"
    assert request(control, "gain", "0")[1] == ["1.0+0.0j"]
    assert control.apply_pending(engine) == 2
    np.testing.assert_array_equal(engine.gains, np.ones((2, NCHAN)))


@pytest.mark.parametrize(
    "args, message",
    [
        ((), "give the polarisation"),
        (("2", "1"), "polarisation '2' does not exist"),
        (("-1",), "does not exist"),
        (("x", "1"), "does not exist"),
        (("0", "banana"), "not a complex number"),
        (("0", "nan"), "not finite"),
        (("0", "1+infj"), "not finite"),
        (("0", "1", "2"), "2 gain values"),
        (("0", *["1"] * (NCHAN + 1)), f"{NCHAN + 1} gain values"),
        (("0", "default"), "not a complex number"),
    ],
)
def test_gain_bad_arguments_fail_and_change_nothing(control, args, message):
    status, fields, _ = request(control, "gain", *args)
    assert status == "fail"
    assert message in fields[0]
    assert control.pending == 0
    np.testing.assert_array_equal(control.gains(0), np.ones(NCHAN))


@pytest.mark.parametrize(
    "args, message",
    [
        ((), "give one gain"),
        (("1", "2", "3"), "3 gain values"),
        (("default", "1"), "2 gain values"),
        (("inf",), "not finite"),
    ],
)
def test_gain_all_bad_arguments(control, args, message):
    status, fields, _ = request(control, "gain-all", *args)
    assert status == "fail" and message in fields[0]
    assert control.pending == 0


def test_delays_set_and_apply(control):
    engine = small_engine()
    status, fields, _ = request(
        control, "delays", "123456", "1e-9,2e-12:0.5,0.01", "-2.5e-10,0:-1.25,-0.002"
    )
    assert (status, fields) == ("ok", [])
    assert control.apply_pending(engine) == 2
    assert engine.delay_models[0] == DelayModel(1e-9, 2e-12, 0.5, 0.01, 123456)
    assert engine.delay_models[1] == DelayModel(-2.5e-10, 0.0, -1.25, -0.002, 123456)
    assert control.delay_model(1) == engine.delay_models[1]


@pytest.mark.parametrize(
    "args, message",
    [
        ((), "0 arguments"),
        (("0", "0,0:0,0"), "2 arguments"),
        (("0", "0,0:0,0", "0,0:0,0", "0,0:0,0"), "4 arguments"),
        (("1.5", "0,0:0,0", "0,0:0,0"), "not a whole number"),
        (("-3", "0,0:0,0", "0,0:0,0"), "out of range"),
        (("0", "0,0,0,0", "0,0:0,0"), "pol 0: delay model"),
        (("0", "0,0:0,0", "0,0:0"), "pol 1: delay model"),
        (("0", "0,0:0,0", "0,0:0,0:1"), "pol 1"),
        (("0", "0,x:0,0", "0,0:0,0"), "delay_rate 'x' is not a number"),
        (("0", "0,0:nan,0", "0,0:0,0"), "phase nan is not finite"),
        (("0", "0,0:0,0", "inf,0:0,0"), "delay inf is not finite"),
        (("0", "1e6,0:0,0", "0,0:0,0"), "2^48"),
        (("0", "0,1.5:0,0", "0,0:0,0"), "delay_rate"),
    ],
)
def test_delays_bad_arguments_fail_and_change_nothing(control, args, message):
    status, fields, _ = request(control, "delays", *args)
    assert status == "fail"
    assert message in fields[0]
    assert control.pending == 0
    assert control.delay_model(0) == DelayModel()


def test_changes_apply_in_order(control):
    engine = small_engine()
    katcp(
        control,
        ("gain", "0", "3"),
        ("gain-all", "5"),
        ("gain", "1", "7"),
        ("delays", "0", "0,0:1,0", "0,0:2,0"),
        ("delays", "10", "0,0:3,0", "0,0:4,0"),
    )
    assert control.apply_pending(engine) == 7
    np.testing.assert_array_equal(engine.gains[0], np.full(NCHAN, 5))
    np.testing.assert_array_equal(engine.gains[1], np.full(NCHAN, 7))
    assert engine.delay_models == [DelayModel(phase_rad=3, epoch_sample=10)] + [
        DelayModel(phase_rad=4, epoch_sample=10)
    ]


def test_apply_pending_refuses_an_engine_of_another_size(control):
    request(control, "gain", "0", "2")
    with pytest.raises(ConfigError, match="32 channels"):
        control.apply_pending(FEngineReference(32, 4, 4))
    assert control.pending == 1  # still queued for the right engine


def test_capture_start_stop_toggles_the_event(control):
    assert control.capturing.is_set()
    assert request(control, "capture-stop")[0] == "ok"
    assert not control.capturing.is_set()
    assert request(control, "capture-stop")[0] == "ok"
    assert not control.capturing.is_set()
    assert request(control, "capture-start")[0] == "ok"
    assert control.capturing.is_set()


def sensor_values(control, name=None):
    args = () if name is None else (name,)
    status, fields, informs = request(control, "sensor-value", *args)
    assert status == "ok", fields
    out = {}
    for m in informs:
        _, _, sname, sstatus, value = (a.decode() for a in m.arguments)
        out[sname] = (sstatus, value)
    return out


def test_sensors_appear_after_update(control):
    before = sensor_values(control)
    assert before["heaps_made"] == ("unknown", "0")
    assert "received" in before  # capture counters exist from the start
    assert "my_rate" not in before
    # From another thread, as the pipeline would.
    t = threading.Thread(
        target=control.update_sensors,
        args=({"heaps_made": 12, "saturated_pol1": np.int64(3), "my_rate": 2.5},),
    )
    t.start()
    t.join()
    # The update lands on the server loop; the next request is served after it.
    after = sensor_values(control)
    assert after["heaps_made"] == ("nominal", "12")
    assert after["saturated_pol1"] == ("nominal", "3")
    assert float(after["my_rate"][1]) == 2.5
    assert sensor_values(control, "heaps_made") == {"heaps_made": ("nominal", "12")}
    control.update_sensors({"heaps_made": 13})
    assert sensor_values(control, "heaps_made")["heaps_made"][1] == "13"


def test_sensor_updates_bad_and_before_start():
    ctl = FEngineControl(SETTINGS)
    ctl.update_sensors({"heaps_skipped": 4, "extra.count": 1})
    with pytest.raises(ConfigError, match="not a katcp sensor name"):
        ctl.update_sensors({"bad name": 1})
    with pytest.raises(ConfigError, match="whole numbers"):
        ctl.update_sensors({"heaps_made": 1.5})
    with pytest.raises(ConfigError, match="int or a float"):
        ctl.update_sensors({"heaps_made": "many"})
    ctl.start()
    try:
        values = sensor_values(ctl)
        assert values["heaps_skipped"] == ("nominal", "4")
        assert values["extra.count"] == ("nominal", "1")
        assert values["heaps_made"][0] == "unknown"
    finally:
        ctl.stop()
    ctl.update_sensors({"heaps_made": 2})  # after stop: kept, no error


def test_bad_engine_settings_and_port_in_use(control):
    with pytest.raises(ConfigError, match="nchan"):
        FEngineControl({"sample_rate_hz": FS})
    with pytest.raises(ConfigError, match="n_pols"):
        FEngineControl({**SETTINGS, "n_pols": 1})
    with pytest.raises(ConfigError, match="sample_rate_hz"):
        FEngineControl({"nchan": 16, "sample_rate_hz": -1.0})
    other = FEngineControl(SETTINGS, port=control.address[1])
    with pytest.raises(ConfigError, match="cannot listen"):
        other.start()
    other.stop()


def tone_heaps(engine: FEngineReference) -> np.ndarray:
    """Payloads of a small tone in channel 5, a few heaps."""
    n = 8 * engine.layout.samples_per_heap
    t = np.arange(n)
    x = np.round(3.0 * np.cos(2 * np.pi * (5.0 / (2 * NCHAN)) * t + 0.3)).astype(np.int16)
    heaps = engine.process(np.stack([x, x]), 0)
    assert heaps
    return np.stack([h.payload for h in heaps]).astype(np.int64)


def test_gain_via_katcp_changes_the_output(control):
    unity = tone_heaps(small_engine())
    assert 5 < np.abs(unity).max() < 60  # a tone, far from clipping after doubling

    engine = small_engine()
    replies = katcp(control, ("gain", "0", "2"), ("gain", "1", "2j"))
    assert [r[0] for r in replies] == ["ok", "ok"]
    assert control.apply_pending(engine) == 2
    doubled = tone_heaps(engine)

    direct = small_engine()
    direct.set_gains(np.array([[2.0] * NCHAN, [2j] * NCHAN]))
    np.testing.assert_array_equal(doubled, tone_heaps(direct))
    # (channel, spectrum, pol, re/im): pol 0 doubled, pol 1 doubled and turned by 90 deg,
    # each within one rounding step.
    assert np.abs(doubled[..., 0, :] - 2 * unity[..., 0, :]).max() <= 1
    assert np.abs(doubled[..., 1, 0] + 2 * unity[..., 1, 1]).max() <= 1
    assert np.abs(doubled[..., 1, 1] - 2 * unity[..., 1, 0]).max() <= 1
    assert np.abs(doubled).max() > np.abs(unity).max()


# -- settings file -------------------------------------------------------------


def test_load_settings_good(tmp_path):
    path = tmp_path / "feng.toml"
    path.write_text(
        """
[engine]            # other tables are left to other readers
nchan = 4

[gains]
pol0 = 1.5
pol1 = [1, "0.5-0.25j", 2.0, "3j"]

[delays.pol0]
delay_s = 1e-9
delay_rate = 2e-12
phase_rad = 0.5
phase_rate_rad_s = 0.01
epoch_sample = 4096

[delays.pol1]
phase_rad = -1.0
"""
    )
    gains, delays = load_settings(path, nchan=4)
    assert gains[0] == 1.5 + 0j and isinstance(gains[0], complex)
    np.testing.assert_array_equal(gains[1], [1, 0.5 - 0.25j, 2, 3j])
    assert delays[0] == DelayModel(1e-9, 2e-12, 0.5, 0.01, 4096)
    assert delays[1] == DelayModel(phase_rad=-1.0)

    # Straight into the queue, then the engine, with the mirror in step.
    ctl = FEngineControl({"nchan": 4, "sample_rate_hz": FS})
    for pol, g in gains.items():
        ctl.queue_gains(pol, g)
    ctl.queue_delay_models(delays)
    engine = FEngineReference(4, 4, 4, sample_rate_hz=FS)
    assert ctl.apply_pending(engine) == 4
    np.testing.assert_array_equal(engine.gains[1], gains[1])
    np.testing.assert_array_equal(ctl.gains(1), gains[1])
    assert engine.delay_models == [delays[0], delays[1]]

    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert load_settings(empty) == ({}, {})


@pytest.mark.parametrize(
    "text, message",
    [
        ("[gains\npol0 = 1", "not valid TOML"),
        ("[gains]\npol2 = 1", "'pol2'"),
        ("[gains]\npol0 = 'x'", "not a complex number"),
        ("[gains]\npol0 = nan", "not finite"),
        ("[gains]\npol0 = [1, [2, 3], 3, 4]", "pol0[1] = [2, 3]"),
        ("[gains]\npol0 = []", "empty list"),
        ("[gains]\npol0 = [1, 2, 3]", "has 3 gains"),
        ("[gains]\npol0 = true", "give a number"),
        ("gains = 1", "gains must be a table"),
        ("[delays.pol0]\ndelay = 1e-9", "unknown keys ['delay']"),
        ("[delays.pol1]\ndelay_s = 'soon'", "delay_s = 'soon'"),
        ("[delays.pol0]\nphase_rad = inf", "phase_rad = inf"),
        ("[delays.pol0]\nepoch_sample = 1.5", "epoch_sample = 1.5"),
        ("[delays.pol0]\nepoch_sample = -1", "epoch_sample = -1"),
        ("[delays.pol0]\ndelay_rate = 2.0", "delay_rate"),
        ("[delays]\npol0 = 1", "must be a table"),
        ("[delays.x]\ndelay_s = 0", "'x'"),
    ],
)
def test_load_settings_bad(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(path, nchan=4)
    assert "bad.toml" in str(info.value)
    assert message in str(info.value)


def test_load_settings_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="missing.toml: settings file not found"):
        load_settings(tmp_path / "missing.toml")


def test_halt_from_a_client_ends_the_thread(control):
    thread = control._thread
    assert request(control, "halt")[0] == "ok"
    thread.join(5)
    assert not thread.is_alive()
    control.stop()  # still fine
    control.update_sensors({"heaps_made": 1})  # no loop to call into: kept quietly
