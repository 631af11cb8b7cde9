#pragma clang diagnostic ignored "-Wmissing-prototypes"

#include <metal_stdlib>
#include <simd/simd.h>

using namespace metal;

struct _5
{
    uint _m0;
    uint _m1;
    float _m2;
    float _m3;
    uint _m4;
};

struct _9
{
    float _m0[1];
};

struct _12
{
    float _m0[1];
};

struct _15
{
    _5 _m0;
};

static inline __attribute__((always_inline))
float _51(float _50)
{
    return 1.0 / (1.0 + exp(-_50));
}

static inline __attribute__((always_inline))
float _19(float _18)
{
    float _29 = abs(_18);
    float _32 = 1.0 / (1.0 + (0.3275910913944244384765625 * _29));
    return sign(_18) * (1.0 - ((_32 * (0.254829585552215576171875 + (_32 * ((-0.284496724605560302734375) + (_32 * (1.42141377925872802734375 + (_32 * ((-1.45315206050872802734375) + (_32 * 1.0614054203033447265625))))))))) * exp((-_29) * _29)));
}

kernel void main0(const device _9& _8 [[buffer(0)]], device _12& _11 [[buffer(1)]], const device _15& _14 [[buffer(2)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    float _82 = 0.0;
    float _85 = 0.0;
    uint _94 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_94 >= _14._m0._m0)
    {
        return;
    }
    if (_14._m0._m4 != 0u)
    {
        _82 = _11._m0[_94];
    }
    else
    {
        _82 = _8._m0[_94];
    }
    switch (_14._m0._m1)
    {
        case 0u:
        {
            _85 = fast::max(_82, 0.0);
            break;
        }
        case 1u:
        {
            _85 = _51(_82);
            break;
        }
        case 2u:
        {
            _85 = _82 * _51(_82);
            break;
        }
        case 3u:
        {
            _85 = (0.5 * _82) * (1.0 + _19(_82 * 0.707106769084930419921875));
            break;
        }
        case 4u:
        {
            _85 = _82 * _51(1.5957691669464111328125 * (_82 + (((0.0447149984538555145263671875 * _82) * _82) * _82)));
            break;
        }
        case 5u:
        {
            _85 = fast::clamp(_82, _14._m0._m2, _14._m0._m3);
            break;
        }
        case 6u:
        {
            _85 = fast::clamp((_14._m0._m2 * _82) + _14._m0._m3, 0.0, 1.0);
            break;
        }
        case 7u:
        {
            _85 = (_82 * fast::clamp(_82 + 3.0, 0.0, 6.0)) / 6.0;
            break;
        }
        default:
        {
            _85 = sqrt(_82);
            break;
        }
    }
    _11._m0[_94] = _85;
}

