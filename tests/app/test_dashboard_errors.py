"""The Dashboard when NVML answers, then fails every call: each GPU's card says so and the app goes on."""


async def test_the_dashboard_shows_an_nvml_error_on_the_gpus_card(broken_nvml):
    from mgpu_tui.app import create_app
    from mgpu_tui.app.widgets.gpu_card import GpuCard
    from mgpu_tui.engine.machine.telemetry import Sampler

    snapshot = Sampler(interval=1.0).sample()
    app = create_app(telemetry=[snapshot], topology=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.3)
        cards = [str(card.render()) for card in app.query(GpuCard)]
        assert len(cards) == 2 and all("NVML error: " in c and "Unknown Error" in c for c in cards), cards
        assert app.is_running  # the app keeps running
